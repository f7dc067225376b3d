package controller

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// gitOperatorHeapBudget is how much the operator's heap may grow while
// four ManifestSyncs fetch 500 MB blobs at once: the fetches cost a few
// MiB (engine/source/git TestBigBlob), the rest is margin for the other
// work of the test process; without the size check, each blob costs its
// 500 MB.
const gitOperatorHeapBudget = 96 << 20

// Git's memory acceptance: four ManifestSyncs whose repositories hold a
// 500 MB blob fail with a size error naming the limit, the operator's heap
// grows by far less than one blob, and a minute after the ManifestSyncs
// are deleted the cache holds nothing of them.
//
// What a hostile tenant gets: its own ManifestSync fails with the size
// error; the operator reads a few kilobytes of its blob.
func TestGitBigBlob(t *testing.T) {
	env.Need(t)
	url, sent := gittest.BigBlobServer(t) // the blob is made before the heap is measured
	cache := gitOperator(t, git.Options{})
	ns := remoteEnv.Namespace(t, nil)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := gittest.HeapPeak()
	var all []*v1alpha1.ManifestSync
	for i := range 4 {
		all = append(all, createGitSync(t, ns, fmt.Sprintf("big-%d", i), fmt.Sprintf("%s/big%d.git", url, i)))
	}
	want := fmt.Sprintf("limit exceeded: the server sent a file (blob) of %d bytes, over the limit of 8388608 bytes a file", gittest.BigBlobSize)
	for _, ms := range all {
		got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSourceFailed, time.Minute)
		if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, want) {
			t.Errorf("%s: %q; want the size error %q", ms.Name, msg, want)
		}
	}
	peak := stop()
	growth := int64(peak) - int64(before.HeapAlloc)
	t.Logf("the operator's heap: %d MiB before, peak %d MiB (growth %d MiB, budget %d MiB); the server sent %d kB of packs",
		before.HeapAlloc>>20, peak>>20, growth>>20, gitOperatorHeapBudget>>20, sent.Load()>>10)
	if growth > gitOperatorHeapBudget {
		t.Errorf("the heap grew by %d MiB while four 500 MB blobs were refused, over the budget of %d MiB", growth>>20, gitOperatorHeapBudget>>20)
	}
	deleteAndSweep(t, cache, all)
}
