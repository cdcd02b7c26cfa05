package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// recorder writes what kubelet asked for where a test reads it. Each container config is a
// file of its own, written under a temporary name and renamed, so a reader never sees half of
// one; the call log is appended one whole line per write.
type recorder struct {
	mu         sync.Mutex
	containers string
	calls      *os.File
	sequence   int
}

// Proto field names (CDI_devices, pod_sandbox_id, ...) are the ones api.proto documents,
// stable across releases, unlike the lowerCamelCase JSON names.
var asJSON = protojson.MarshalOptions{UseProtoNames: true}

func newRecorder(folder string) (*recorder, error) {
	containers := filepath.Join(folder, "containers")
	if err := os.MkdirAll(containers, 0o755); err != nil {
		return nil, fmt.Errorf("record folder: %w", err)
	}
	calls, err := os.OpenFile(filepath.Join(folder, "calls.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("call log: %w", err)
	}
	return &recorder{containers: containers, calls: calls}, nil
}

func (r *recorder) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.calls.Close()
}

// call appends one line to calls.jsonl: the call's name, the time, and what it was about.
func (r *recorder) call(name string, fields map[string]string) {
	line := map[string]string{"call": name, "time": time.Now().UTC().Format(time.RFC3339Nano)}
	for key, value := range fields {
		line[key] = value
	}
	data, err := json.Marshal(line)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.calls.Write(append(data, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "fake-runtime: call log: %v\n", err)
	}
}

// container writes one CreateContainer request, with the id the container was given.
func (r *recorder) container(id string, request *runtimeapi.CreateContainerRequest) error {
	body, err := asJSON.Marshal(request)
	if err != nil {
		return err
	}
	data, err := json.Marshal(map[string]any{"container_id": id, "request": json.RawMessage(body)})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.sequence++
	sequence := r.sequence
	r.mu.Unlock()
	pod := request.GetSandboxConfig().GetMetadata()
	name := fmt.Sprintf("%06d-%s_%s_%s.json", sequence, safe(pod.GetNamespace()), safe(pod.GetName()),
		safe(request.GetConfig().GetMetadata().GetName()))
	path := filepath.Join(r.containers, name)
	partial := path + ".partial"
	if err := os.WriteFile(partial, data, 0o644); err != nil {
		return err
	}
	return os.Rename(partial, path)
}

// safe keeps a Kubernetes name usable in a file name (they are DNS labels already; this only
// guards against a runtime client that sends something else).
func safe(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == 0 {
			return '-'
		}
		return r
	}, name)
}
