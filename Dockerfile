# fencegate's image, for those who build with a container engine. `make image`
# builds the same image with no daemon and no base image (deploy/image); the
# tests there check this file agrees with it (user, entrypoint, ports).
#
#   docker build --build-arg VERSION=v0.1.0 -t fencegate:v0.1.0 .

# Keep in step with go.mod's go directive (a test checks).
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Static: the final image has no libc and no dynamic loader.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fencegate ./cmd/fencegate \
	&& /out/fencegate version
# The directories of the image: /tmp (1777) and the working directory, which
# the second COPY below hands to the user.
RUN mkdir -p /out/root/tmp /out/root/var/lib/fencegate \
	&& chmod 1777 /out/root/tmp && chmod 700 /out/root/var/lib/fencegate

FROM scratch
ARG VERSION=dev
# The CA bundle, so rediss:// and Firestore can verify their servers.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/fencegate /fencegate
COPY --from=build /out/root/ /
COPY --from=build --chown=65532:65532 /out/root/var/lib/ /var/lib/
USER 65532:65532
WORKDIR /var/lib/fencegate
EXPOSE 8080 9090 9191 8443
ENTRYPOINT ["/fencegate"]
CMD ["serve"]
LABEL org.opencontainers.image.title="fencegate" \
	org.opencontainers.image.source="https://github.com/fencegate/fencegate" \
	org.opencontainers.image.version="${VERSION}"
