package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// images is the image service: a pull stores the name and succeeds at once (nothing is
// downloaded), so kubelet's image manager sees the image present afterwards, as it would
// after a real pull.
type images struct {
	runtimeapi.UnimplementedImageServiceServer
	runtime *runtime
}

// Reported size of every image: kubelet's image GC and Node status show it, nothing checks it.
const imageSize = 1 << 20

// findImage by name or id; the caller holds the lock.
func (r *runtime) findImage(ref string) *runtimeapi.Image {
	if image, found := r.images[ref]; found {
		return image
	}
	for _, image := range r.images {
		if image.Id == ref {
			return image
		}
	}
	return nil
}

func imageID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (s *images) PullImage(_ context.Context, request *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	name := request.GetImage().GetImage()
	id := imageID(name)
	s.runtime.mu.Lock()
	s.runtime.images[name] = &runtimeapi.Image{
		Id: id, RepoTags: []string{name}, Size: imageSize, Spec: request.GetImage(),
	}
	s.runtime.mu.Unlock()
	s.runtime.record.call("PullImage", map[string]string{"image": name})
	return &runtimeapi.PullImageResponse{ImageRef: id}, nil
}

func (s *images) ImageStatus(_ context.Context, request *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	s.runtime.mu.Lock()
	defer s.runtime.mu.Unlock()
	// An unknown image is a nil image, not an error: that is how kubelet learns to pull it.
	return &runtimeapi.ImageStatusResponse{Image: s.runtime.findImage(request.GetImage().GetImage())}, nil
}

func (s *images) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	s.runtime.mu.Lock()
	defer s.runtime.mu.Unlock()
	var found []*runtimeapi.Image
	for _, image := range s.runtime.images {
		found = append(found, image)
	}
	return &runtimeapi.ListImagesResponse{Images: found}, nil
}

func (s *images) RemoveImage(_ context.Context, request *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	s.runtime.mu.Lock()
	defer s.runtime.mu.Unlock()
	if image := s.runtime.findImage(request.GetImage().GetImage()); image != nil {
		for name, known := range s.runtime.images {
			if known == image {
				delete(s.runtime.images, name)
			}
		}
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

// ImageFsInfo: the record folder's file system stands for the image file system; kubelet asks
// cAdvisor for its capacity by that mount point.
func (s *images) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	s.runtime.mu.Lock()
	used := uint64(len(s.runtime.images)) * imageSize
	s.runtime.mu.Unlock()
	usage := &runtimeapi.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: s.runtime.fsRoot},
		UsedBytes:  &runtimeapi.UInt64Value{Value: used},
		InodesUsed: &runtimeapi.UInt64Value{Value: uint64(len(s.runtime.images))},
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{usage}}, nil
}
