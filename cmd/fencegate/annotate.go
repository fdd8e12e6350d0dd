package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/admission"
	"github.com/fencegate/fencegate/lockstore"
)

const annotateUsage = `usage: fencegate lock annotate [--key K] [--fence F] [--patch] < object.{json,yaml}

Stamps a Kubernetes object with a held lock's key and fence, the annotations the
admission webhook checks (fencegate.io/key, fencegate.io/fence). The key and fence
default to FENCE_KEY and FENCE_TOKEN, which 'fencegate lock run' exports:

  fencegate lock run --key cm/settings -- sh -c \
    'kubectl get configmap settings -o json | jq ".data.mode=\"on\"" | fencegate lock annotate | kubectl apply -f -'

  fencegate lock run --key cm/settings -- sh -c \
    'kubectl patch configmap settings --type merge -p "$(fencegate lock annotate --patch)"'

Without --patch it reads one object (JSON or YAML) on stdin and prints it as JSON.`

// runAnnotate prints an object (or a merge patch) carrying the fence
// annotations; it needs no gateway.
func runAnnotate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("lock annotate", annotateUsage)
	key := fs.String("key", os.Getenv("FENCE_KEY"), "lock key (env FENCE_KEY)")
	fence := fs.String("fence", os.Getenv("FENCE_TOKEN"), "fence (env FENCE_TOKEN)")
	patch := fs.Bool("patch", false, "print a JSON merge patch instead of reading an object")
	keyAnn := fs.String("key-annotation", admission.DefaultKeyAnnotation, "annotation holding the key")
	fenceAnn := fs.String("fence-annotation", admission.DefaultFenceAnnotation, "annotation holding the fence")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if *key == "" || !lockstore.ValidFence(*fence) {
		fmt.Fprintln(stderr, "fencegate lock annotate: needs --key and a 15-digit --fence (or FENCE_KEY and FENCE_TOKEN from 'fencegate lock run')")
		return exitUsage
	}
	names := admission.Annotations{Key: *keyAnn, Fence: *fenceAnn}
	if *patch {
		b, err := admission.MergePatch(*key, *fence, names)
		if err != nil {
			fmt.Fprintln(stderr, "fencegate lock annotate:", err)
			return exitUsage
		}
		fmt.Fprintln(stdout, string(b))
		return exitOK
	}
	raw, err := io.ReadAll(io.LimitReader(stdin, 16<<20))
	if err != nil {
		fmt.Fprintln(stderr, "fencegate lock annotate: reading stdin:", err)
		return exitFailure
	}
	obj, err := decodeObject(raw)
	if err != nil {
		fmt.Fprintln(stderr, "fencegate lock annotate:", err)
		return exitUsage
	}
	if err := admission.AnnotateUnstructured(obj, *key, *fence, names); err != nil {
		fmt.Fprintln(stderr, "fencegate lock annotate:", err)
		return exitUsage
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(obj); err != nil {
		fmt.Fprintln(stderr, "fencegate lock annotate:", err)
		return exitFailure
	}
	return exitOK
}

// decodeObject reads one JSON or YAML object (JSON is YAML, but decoding it
// as JSON keeps numbers exact).
func decodeObject(raw []byte) (map[string]any, error) {
	var obj map[string]any
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("stdin is not a JSON object: %w", err)
		}
		return obj, nil
	}
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("stdin is not a YAML object: %w", err)
	}
	if obj == nil {
		return nil, fmt.Errorf("stdin holds no object")
	}
	return obj, nil
}
