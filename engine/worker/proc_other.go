//go:build !linux

package worker

import (
	"errors"
)

// Elsewhere than Linux a worker's memory is bounded by the Go runtime's
// soft limit only.

func limitAddressSpace(uint64) (uint64, error) { return 0, nil }

func residentSize(int) (uint64, error) { return 0, errors.New("resident size: not supported") }
