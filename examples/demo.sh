# demo.sh — the orders demo both examples walk through (examples/orders and
# examples/orders-node): fencegate (lock API + forward-auth + the fencing proxy,
# on PostgreSQL, with a fresh proof key), the orders API, and nginx with
# fencegate's shipped forward-auth config, all on free loopback ports; then
# holders A and B write through each edge and straight to the API, and every
# answer is checked.
#
# Sourced by examples/*/run.sh after they have re-run themselves under
# scripts/testenv (DATABASE_URL is set) from the repository's root. The caller
# sets api_what (what the build step names) and defines:
#   build_api ARGS...         build the orders API into "$tmp" (the run's
#                             scratch directory; "$tmp/fencegate" is built)
#   start_api ADDR GW TABLE   run the API in the foreground on ADDR, verifying
#                             proofs against GW, its orders in TABLE
# then calls demo_main "$@" (--demo: stop after the demo).
# Needs: go, PostgreSQL's binaries, curl, python3; nginx for the nginx half.

demo_main() {
	demo_only=false
	[[ ${1:-} == --demo ]] && demo_only=true

	tmp=$(mktemp -d /tmp/fencegate-orders.XXXXXX)
	pids=()
	cleanup() {
		local rc=$?
		for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
		for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
		rm -rf "$tmp"
		exit "$rc"
	}
	trap cleanup EXIT
	trap 'exit 130' INT TERM

	log() { printf '\n== %s\n' "$*"; }
	die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }
	free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
	json() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
	wait_http() {
		for _ in $(seq 1 150); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.2; done
		die "$1 did not answer"
	}

	log "building fencegate and $api_what"
	# The flags of every test build (cmd/fencegate/fencegatetest), so a test run
	# compiles the shared packages once; FENCEGATE_TEST_BINARY is the fencegate
	# `make test` already built.
	if [[ -n ${FENCEGATE_TEST_BINARY:-} ]]; then
		cp "$FENCEGATE_TEST_BINARY" "$tmp/fencegate"
	else
		CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$tmp/fencegate" ./cmd/fencegate
	fi
	build_api "$@"

	http_port=$(free_port); proxy_port=$(free_port); api_port=$(free_port); nginx_port=$(free_port)
	gw="http://127.0.0.1:$http_port"
	ns="orders_demo_$(python3 -c 'import secrets; print(secrets.token_hex(3))')"
	sep='?'; [[ $DATABASE_URL == *\?* ]] && sep='&'
	store="$DATABASE_URL${sep}table=${ns}_locks&fenceTable=${ns}_fences&auditTable=${ns}_audit&barrierTable=${ns}_writes"

	"$tmp/fencegate" proofkey --kid demo --out "$tmp/demo.seed" >/dev/null
	cat >"$tmp/fencegate.yaml" <<-EOF
	check:
	  timeout: 1s # a demo, not a latency figure: a loaded machine must not turn a refusal into 503
	proof:
	  keys:
	    - {kid: demo, privateKeyFile: $tmp/demo.seed}
	proxy:
	  addr: 127.0.0.1:$proxy_port
	  routes:
	    - name: orders
	      prefix: /orders
	      upstream: http://127.0.0.1:$api_port
	      key: "orders/{2:int}"
	      proof: signed
	    - name: jobs
	      prefix: /jobs
	      upstream: http://127.0.0.1:$api_port
	      policy: "off"
	EOF

	log "starting fencegate on PostgreSQL (lock API and forward-auth $gw, proxy http://127.0.0.1:$proxy_port)"
	"$tmp/fencegate" serve --store "$store" --config "$tmp/fencegate.yaml" --http-addr "127.0.0.1:$http_port" \
		--grpc-addr off --authz-addr off --admission-addr off >"$tmp/fencegate.log" 2>&1 &
	pids+=($!)
	wait_http "$gw/healthz"

	log "starting the orders API on 127.0.0.1:$api_port (proofs verified against $gw/v1/proof/keys)"
	start_api "127.0.0.1:$api_port" "$gw" "${ns}_orders" >"$tmp/orders.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 150); do grep -q "orders ready" "$tmp/orders.log" && break; sleep 0.2; done
	grep -q "orders ready" "$tmp/orders.log" || { cat "$tmp/orders.log" >&2; die "the orders API did not start"; }

	edges=("proxy http://127.0.0.1:$proxy_port")
	if command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]]; then
		nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
		mkdir -p "$tmp/nginx"
		sed -e "s|listen 127.0.0.1:10080;|listen 127.0.0.1:$nginx_port;|" \
			-e "s|server 127.0.0.1:8080;|server 127.0.0.1:$http_port;|" \
			-e "s|server 127.0.0.1:3000;|server 127.0.0.1:$api_port;|" \
			-e "s|^http {|http {\n    access_log $tmp/nginx/access.log;\n    client_body_temp_path $tmp/nginx/body;\n    proxy_temp_path $tmp/nginx/proxy;\n    fastcgi_temp_path $tmp/nginx/fastcgi;\n    uwsgi_temp_path $tmp/nginx/uwsgi;\n    scgi_temp_path $tmp/nginx/scgi;|" \
			deploy/nginx/nginx.conf >"$tmp/nginx/nginx.conf"
		log "starting nginx with deploy/nginx/nginx.conf on http://127.0.0.1:$nginx_port (forward-auth to fencegate)"
		"$nginx_bin" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" \
			-g "daemon off; pid $tmp/nginx/nginx.pid; error_log $tmp/nginx/error.log warn;" &
		pids+=($!)
		for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$nginx_port/catalog/" && break; sleep 0.1; done
		edges+=("nginx http://127.0.0.1:$nginx_port")
	else
		log "nginx not found: only the proxy half runs"
	fi

	fails=0
	# step NAME WANT_STATUS CURL_ARGS...: one request, its answer, and a check.
	step() {
		local name=$1 want=$2; shift 2
		local out status
		out=$(curl -sS -o "$tmp/body" -w '%{http_code}' "$@") || out=000
		status=$out
		printf '%-64s %s %s\n' "$name" "$status" "$(head -c 300 "$tmp/body")"
		if [[ $status != "$want" ]]; then
			printf '   ^ want %s\n' "$want"
			fails=$((fails + 1))
		fi
	}
	acquire() { "$tmp/fencegate" lock acquire --server "$gw" --key orders/42 --ttl 60s; }

	log "demo"
	a=$(acquire); fa=$(json fence <<<"$a"); pa=$(json proof <<<"$a"); la=$(json lockId <<<"$a")
	echo "holder A took orders/42: fence $fa"
	for e in "${edges[@]}"; do
		name=${e%% *}; url=${e#* }
		step "A writes through the $name" 200 -X PUT "$url/orders/42" -H "x-fence-token: $fa" -H "x-fence-proof: $pa" -d '{"item":"tea","qty":1}'
	done
	e=${edges[-1]}; name=${e%% *}; url=${e#* }
	step "A writes again through the $name, queued (the worker runs it later)" 202 -X PUT "$url/orders/42" -H "x-fence-token: $fa" -H "x-fence-proof: $pa" -H "Prefer: respond-async" -d '{"item":"tea","qty":2}'
	job=$(json job <"$tmp/body")
	"$tmp/fencegate" lock release --server "$gw" --lock-id "$la" >/dev/null
	b=$(acquire); fb=$(json fence <<<"$b"); pb=$(json proof <<<"$b")
	echo "A released; holder B took orders/42: fence $fb"
	step "B writes through the $name" 200 -X PUT "$url/orders/42" -H "x-fence-token: $fb" -H "x-fence-proof: $pb" -d '{"item":"coffee","qty":5}'
	step "A writes through the $name after the handover: the edge refuses" 409 -X PUT "$url/orders/42" -H "x-fence-token: $fa" -H "x-fence-proof: $pa" -d '{"item":"tea","qty":3}'
	curl -sS -X POST "http://127.0.0.1:$api_port/jobs/drain" >/dev/null # the worker catches up, after B's write
	for _ in $(seq 1 100); do curl -sS "$url/jobs/$job" | grep -q pending || break; sleep 0.1; done
	step "A's queued write, committed after B's: the API refused it" 200 "$url/jobs/$job"
	grep -q '"state":"refused"' "$tmp/body" || { echo "   ^ want state refused"; fails=$((fails + 1)); }
	api="http://127.0.0.1:$api_port"
	step "A's fence and proof replayed straight to the API (no edge)" 409 -X PUT "$api/orders/42" -H "x-fence-verified: $fa" -H "x-fence-proof: $pa" -d '{"item":"tea","qty":4}'
	step "a made-up fence straight to the API, no proof" 403 -X PUT "$api/orders/42" -H "x-fence-verified: 000000000999999" -d '{"item":"x","qty":1}'
	step "B's proof sent for order 43 straight to the API" 403 -X PUT "$api/orders/43" -H "x-fence-verified: $fb" -H "x-fence-proof: $pb" -d '{"item":"x","qty":1}'
	step "the order: B's write" 200 "$url/orders/42"
	grep -q "\"fence\":\"$fb\"" "$tmp/body" || { echo "   ^ want fence $fb"; fails=$((fails + 1)); }

	if ((fails > 0)); then
		printf '\n%d step(s) did not answer as expected; logs:\n' "$fails"
		tail -n 20 "$tmp/fencegate.log" "$tmp/orders.log"
		exit 1
	fi
	log "every step answered as expected"
	$demo_only && exit 0
	echo "fencegate $gw, proxy http://127.0.0.1:$proxy_port, orders API $api, nginx ${edges[1]#* }; Ctrl-C stops"
	wait
}
