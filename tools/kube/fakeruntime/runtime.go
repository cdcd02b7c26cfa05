package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	runtimeName = "xpushare-fake-runtime"
	// The CRI version kubelet 1.36 speaks; kubelet refuses a runtime that names another.
	criVersion = "v1"
	// Runtime's own version, shown in the Node's status.nodeInfo.containerRuntimeVersion.
	runtimeVersion = "0.1.0"
)

type sandbox struct {
	id        string
	config    *runtimeapi.PodSandboxConfig
	state     runtimeapi.PodSandboxState
	createdAt int64
	ip        string
}

type container struct {
	id         string
	sandboxID  string
	config     *runtimeapi.ContainerConfig
	imageRef   string
	state      runtimeapi.ContainerState
	createdAt  int64
	startedAt  int64
	finishedAt int64
	exitCode   int32
	reason     string
	logPath    string
}

// runtime keeps the runtime's objects in memory; one lock guards them all (kubelet makes a few
// calls a second on a test node).
type runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu         sync.Mutex
	record     *recorder
	fsRoot     string
	sandboxes  map[string]*sandbox
	containers map[string]*container
	images     map[string]*runtimeapi.Image
	nextIP     int
}

func newRuntime(record *recorder, fsRoot string) *runtime {
	return &runtime{
		record:     record,
		fsRoot:     fsRoot,
		sandboxes:  map[string]*sandbox{},
		containers: map[string]*container{},
		images:     map[string]*runtimeapi.Image{},
	}
}

func newID() string {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		panic(err)
	}
	return hex.EncodeToString(raw)
}

func podName(config *runtimeapi.PodSandboxConfig) string {
	meta := config.GetMetadata()
	return meta.GetNamespace() + "/" + meta.GetName()
}

func (r *runtime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       runtimeName,
		RuntimeVersion:    runtimeVersion,
		RuntimeApiVersion: criVersion,
	}, nil
}

// RuntimeConfig: kubelet 1.36 takes its cgroup driver from this answer and will not start
// without it. cgroupfs, because nothing here runs under systemd.
func (r *runtime) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{
		Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS},
	}, nil
}

func (r *runtime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: true},
		}},
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{}}},
		Features:        &runtimeapi.RuntimeFeatures{},
	}, nil
}

func (r *runtime) UpdateRuntimeConfig(context.Context, *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// -- sandboxes ------------------------------------------------------------------------------

func (r *runtime) RunPodSandbox(_ context.Context, request *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	config := request.GetConfig()
	if config.GetMetadata() == nil {
		return nil, status.Error(codes.InvalidArgument, "RunPodSandbox: the config has no metadata")
	}
	r.mu.Lock()
	r.nextIP++
	// One address per sandbox from a documentation-style private range; nothing routes it.
	ip := fmt.Sprintf("10.88.%d.%d", (r.nextIP/250)%250, r.nextIP%250+1)
	box := &sandbox{id: newID(), config: config, state: runtimeapi.PodSandboxState_SANDBOX_READY, createdAt: time.Now().UnixNano(), ip: ip}
	r.sandboxes[box.id] = box
	r.mu.Unlock()
	if dir := config.GetLogDirectory(); dir != "" {
		_ = os.MkdirAll(dir, 0o755)
	}
	r.record.call("RunPodSandbox", map[string]string{"sandbox": box.id, "pod": podName(config), "uid": config.GetMetadata().GetUid()})
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: box.id}, nil
}

func (r *runtime) StopPodSandbox(_ context.Context, request *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	r.mu.Lock()
	box, found := r.sandboxes[request.GetPodSandboxId()]
	if found {
		box.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		for _, c := range r.containers {
			if c.sandboxID == box.id {
				c.stop(time.Now())
			}
		}
	}
	r.mu.Unlock()
	// Stopping an unknown sandbox succeeds: the CRI asks it of runtimes (kubelet retries it
	// after a restart of either side).
	if found {
		r.record.call("StopPodSandbox", map[string]string{"sandbox": box.id, "pod": podName(box.config)})
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (r *runtime) RemovePodSandbox(_ context.Context, request *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	r.mu.Lock()
	box, found := r.sandboxes[request.GetPodSandboxId()]
	if found {
		delete(r.sandboxes, box.id)
		for id, c := range r.containers {
			if c.sandboxID == box.id {
				delete(r.containers, id)
			}
		}
	}
	r.mu.Unlock()
	if found {
		r.record.call("RemovePodSandbox", map[string]string{"sandbox": box.id, "pod": podName(box.config)})
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (r *runtime) PodSandboxStatus(_ context.Context, request *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	box, found := r.sandboxes[request.GetPodSandboxId()]
	if !found {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", request.GetPodSandboxId())
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: box.status()}, nil
}

func (b *sandbox) status() *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id:          b.id,
		Metadata:    b.config.GetMetadata(),
		State:       b.state,
		CreatedAt:   b.createdAt,
		Network:     &runtimeapi.PodSandboxNetworkStatus{Ip: b.ip},
		Labels:      b.config.GetLabels(),
		Annotations: b.config.GetAnnotations(),
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: b.config.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
	}
}

func (r *runtime) ListPodSandbox(_ context.Context, request *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	filter := request.GetFilter()
	r.mu.Lock()
	defer r.mu.Unlock()
	var items []*runtimeapi.PodSandbox
	for _, b := range r.sandboxes {
		if filter.GetId() != "" && filter.GetId() != b.id {
			continue
		}
		if filter.GetState() != nil && filter.GetState().GetState() != b.state {
			continue
		}
		if !matches(filter.GetLabelSelector(), b.config.GetLabels()) {
			continue
		}
		items = append(items, &runtimeapi.PodSandbox{
			Id: b.id, Metadata: b.config.GetMetadata(), State: b.state, CreatedAt: b.createdAt,
			Labels: b.config.GetLabels(), Annotations: b.config.GetAnnotations(),
		})
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

func matches(selector, labels map[string]string) bool {
	for key, value := range selector {
		if labels[key] != value {
			return false
		}
	}
	return true
}

// -- containers -----------------------------------------------------------------------------

func (r *runtime) CreateContainer(_ context.Context, request *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	config := request.GetConfig()
	if config.GetMetadata() == nil {
		return nil, status.Error(codes.InvalidArgument, "CreateContainer: the config has no metadata")
	}
	r.mu.Lock()
	box, found := r.sandboxes[request.GetPodSandboxId()]
	if !found || box.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		r.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found or not ready", request.GetPodSandboxId())
	}
	imageRef := ""
	if image := r.findImage(config.GetImage().GetImage()); image != nil {
		imageRef = image.Id
	}
	logPath := ""
	if config.GetLogPath() != "" {
		logPath = filepath.Join(box.config.GetLogDirectory(), config.GetLogPath())
	}
	c := &container{
		id: newID(), sandboxID: box.id, config: config, imageRef: imageRef,
		state: runtimeapi.ContainerState_CONTAINER_CREATED, createdAt: time.Now().UnixNano(), logPath: logPath,
	}
	r.containers[c.id] = c
	pod := podName(box.config)
	r.mu.Unlock()
	if err := r.record.container(c.id, request); err != nil {
		return nil, status.Errorf(codes.Internal, "recording container %s of %s: %v", config.GetMetadata().GetName(), pod, err)
	}
	// An empty log file where kubelet looks for one, as a runtime that ran the container would
	// leave (kubelet's log rotation stats it).
	if logPath != "" {
		if file, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_ = file.Close()
		}
	}
	r.record.call("CreateContainer", map[string]string{"container": c.id, "sandbox": box.id, "pod": pod, "name": config.GetMetadata().GetName()})
	return &runtimeapi.CreateContainerResponse{ContainerId: c.id}, nil
}

func (r *runtime) lookup(id string) (*container, string, error) {
	c, found := r.containers[id]
	if !found {
		return nil, "", status.Errorf(codes.NotFound, "container %q not found", id)
	}
	pod := ""
	if box, ok := r.sandboxes[c.sandboxID]; ok {
		pod = podName(box.config)
	}
	return c, pod, nil
}

func (r *runtime) StartContainer(_ context.Context, request *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	r.mu.Lock()
	c, pod, err := r.lookup(request.GetContainerId())
	if err == nil && c.state != runtimeapi.ContainerState_CONTAINER_CREATED {
		err = status.Errorf(codes.FailedPrecondition, "container %q is not in the created state", c.id)
	}
	if err == nil {
		c.state = runtimeapi.ContainerState_CONTAINER_RUNNING
		c.startedAt = time.Now().UnixNano()
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	r.record.call("StartContainer", map[string]string{"container": c.id, "pod": pod, "name": c.config.GetMetadata().GetName()})
	return &runtimeapi.StartContainerResponse{}, nil
}

func (c *container) stop(now time.Time) {
	if c.state == runtimeapi.ContainerState_CONTAINER_EXITED {
		return
	}
	c.state = runtimeapi.ContainerState_CONTAINER_EXITED
	c.finishedAt = now.UnixNano()
	// What a process ended by SIGTERM reports; no process ran, so nothing else is truer.
	c.exitCode = 143
	c.reason = "Error"
}

func (r *runtime) StopContainer(_ context.Context, request *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	r.mu.Lock()
	c, pod, err := r.lookup(request.GetContainerId())
	if err == nil {
		c.stop(time.Now())
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	r.record.call("StopContainer", map[string]string{"container": c.id, "pod": pod, "name": c.config.GetMetadata().GetName()})
	return &runtimeapi.StopContainerResponse{}, nil
}

func (r *runtime) RemoveContainer(_ context.Context, request *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	r.mu.Lock()
	c, pod, err := r.lookup(request.GetContainerId())
	if err == nil {
		delete(r.containers, c.id)
	}
	r.mu.Unlock()
	if err != nil {
		// Removing a container that is gone succeeds (CRI: the call must be idempotent).
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	r.record.call("RemoveContainer", map[string]string{"container": c.id, "pod": pod, "name": c.config.GetMetadata().GetName()})
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (r *runtime) ListContainers(_ context.Context, request *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	filter := request.GetFilter()
	r.mu.Lock()
	defer r.mu.Unlock()
	var items []*runtimeapi.Container
	for _, c := range r.containers {
		if filter.GetId() != "" && filter.GetId() != c.id {
			continue
		}
		if filter.GetPodSandboxId() != "" && filter.GetPodSandboxId() != c.sandboxID {
			continue
		}
		if filter.GetState() != nil && filter.GetState().GetState() != c.state {
			continue
		}
		if !matches(filter.GetLabelSelector(), c.config.GetLabels()) {
			continue
		}
		items = append(items, &runtimeapi.Container{
			Id: c.id, PodSandboxId: c.sandboxID, Metadata: c.config.GetMetadata(), Image: c.config.GetImage(),
			ImageRef: c.imageRef, ImageId: c.imageRef, State: c.state, CreatedAt: c.createdAt,
			Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(),
		})
	}
	return &runtimeapi.ListContainersResponse{Containers: items}, nil
}

func (r *runtime) ContainerStatus(_ context.Context, request *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, _, err := r.lookup(request.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: c.id, Metadata: c.config.GetMetadata(), State: c.state,
		CreatedAt: c.createdAt, StartedAt: c.startedAt, FinishedAt: c.finishedAt, ExitCode: c.exitCode,
		Reason: c.reason, Image: c.config.GetImage(), ImageRef: c.imageRef, ImageId: c.imageRef,
		Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(), Mounts: c.config.GetMounts(),
		LogPath: c.logPath,
	}}, nil
}

func (r *runtime) UpdateContainerResources(context.Context, *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func (r *runtime) ReopenContainerLog(context.Context, *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// ListContainerStats: zero usage for every container, so kubelet's stats provider (CRI stats
// by default) finds an entry for each and logs no error.
func (r *runtime) ListContainerStats(_ context.Context, request *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	filter := request.GetFilter()
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	var stats []*runtimeapi.ContainerStats
	for _, c := range r.containers {
		if filter.GetId() != "" && filter.GetId() != c.id {
			continue
		}
		if filter.GetPodSandboxId() != "" && filter.GetPodSandboxId() != c.sandboxID {
			continue
		}
		if !matches(filter.GetLabelSelector(), c.config.GetLabels()) {
			continue
		}
		stats = append(stats, c.stats(now, r.fsRoot))
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: stats}, nil
}

func (r *runtime) ContainerStats(_ context.Context, request *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, _, err := r.lookup(request.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: c.stats(time.Now().UnixNano(), r.fsRoot)}, nil
}

func (c *container) stats(now int64, fsRoot string) *runtimeapi.ContainerStats {
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id: c.id, Metadata: c.config.GetMetadata(), Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(),
		},
		Cpu:    &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{}},
		Memory: &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{}},
		WritableLayer: &runtimeapi.FilesystemUsage{
			Timestamp: now, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: fsRoot},
			UsedBytes: &runtimeapi.UInt64Value{}, InodesUsed: &runtimeapi.UInt64Value{},
		},
	}
}
