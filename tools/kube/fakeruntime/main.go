// Command fake-runtime is a CRI server (the runtime and image services of k8s.io/cri-api) that
// runs nothing: it keeps pod sandboxes, containers and images in memory, answers kubelet as a
// container runtime would, and writes every container config kubelet sends it to a folder, so
// a test can read what kubelet asked the runtime to do (environment, mounts, device nodes, CDI
// devices, annotations) after kubelet's device manager and DRA manager had their say.
//
// Why our own: a real kubelet needs a runtime to admit a pod, and containerd would pull images
// and start processes, which our test machines cannot and need not do. The fake runtime of
// k8s.io/cri-client is a client-side double for kubelet's own unit tests, not a server.
//
// Usage:
//
//	fake-runtime --listen /run/x/cri.sock --record /tmp/x/record
//
// The record folder holds containers/NNNNNN-NAMESPACE_POD_CONTAINER.json (the CreateContainer
// request in protojson with proto field names, plus the id it was given) and calls.jsonl (one
// line per call that changes state: RunPodSandbox, CreateContainer, StartContainer,
// StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox, PullImage).
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	listen := flag.String("listen", "", "unix socket path to serve the CRI on")
	record := flag.String("record", "", "folder the container configs and the call log are written to")
	flag.Parse()
	if *listen == "" || *record == "" {
		fmt.Fprintln(os.Stderr, "fake-runtime: --listen SOCKET and --record FOLDER are required")
		os.Exit(2)
	}
	if err := run(*listen, *record); err != nil {
		fmt.Fprintf(os.Stderr, "fake-runtime: %v\n", err)
		os.Exit(1)
	}
}

func run(socket, folder string) error {
	recorder, err := newRecorder(folder)
	if err != nil {
		return err
	}
	defer recorder.close()
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return fmt.Errorf("socket folder: %w", err)
	}
	// A socket left by a killed run would make Listen fail with "address in use".
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("stale socket %s: %w", socket, err)
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	server := grpc.NewServer()
	state := newRuntime(recorder, filepath.Dir(folder))
	runtimeapi.RegisterRuntimeServiceServer(server, state)
	runtimeapi.RegisterImageServiceServer(server, &images{runtime: state})

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	fmt.Fprintf(os.Stderr, "fake-runtime: serving the CRI on %s, recording into %s\n", socket, folder)
	err = server.Serve(listener)
	_ = os.Remove(socket)
	return err
}
