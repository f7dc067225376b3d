package main

import "testing"

// The operator sets no client-side limit unless --kube-api-qps asks for
// one: client-go would read a QPS of 0 as 5 requests per second.
func TestClientLimits(t *testing.T) {
	for _, c := range []struct {
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{0, 0, -1, 0},
		{0, 300, -1, 0},
		{-1, 0, -1, 0},
		{50, 0, 50, 100},
		{50, 80, 50, 80},
		{0.2, 0, 0.2, 1},
	} {
		if qps, burst := clientLimits(c.qps, c.burst); qps != c.wantQPS || burst != c.wantBurst {
			t.Errorf("clientLimits(%v, %d) = %v, %d; want %v, %d", c.qps, c.burst, qps, burst, c.wantQPS, c.wantBurst)
		}
	}
}
