package charts

import (
	"context"
	"fmt"
	"maps"
	"path"
	"strings"

	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
)

// Dependencies returns the snapshot of a helm source of the source form
// called name: dir is the chart's directory (the subtree of the source it
// names), to which the dependencies of its Chart.lock that are not
// vendored under charts/ are added. auth, when set, is sent to the
// repositories of those dependencies that are on the host src.Repository
// names (the source form has none, so none is sent).
func (f *Fetcher) Dependencies(ctx context.Context, name string, src v1alpha1.HelmSource, dir *engine.Snapshot, auth *Auth) (*engine.Snapshot, error) {
	c, err := load(dir.Files)
	if err != nil {
		return nil, fmt.Errorf("source %q: helm %s: %w", name, where(src), err)
	}
	revision := c.Name() + "@" + c.Metadata.Version + "@" + dir.Revision
	missing, err := unvendored(c)
	if err != nil {
		return nil, fmt.Errorf("source %q: helm %s: %w", name, where(src), err)
	}
	if len(missing) == 0 { // nothing to fetch: no network
		return &engine.Snapshot{Revision: revision, Files: maps.Clone(dir.Files), Time: dir.Time, Origin: dir.Origin}, nil
	}
	key := strings.Join([]string{"deps", src.Source, src.Path, dir.Revision, auth.digest()}, "\x00")
	snap, err := f.flights.Do(ctx, key, func(ctx context.Context) (*engine.Snapshot, error) {
		files, err := f.withDependencies(ctx, c.Name(), dir.Files, ref{}, auth)
		if err != nil {
			return nil, f.timedOut(ctx, err)
		}
		return &engine.Snapshot{Revision: revision, Files: files, Time: dir.Time}, nil
	})
	if err != nil {
		return nil, redact.New(auth.secrets()...).Error(fmt.Errorf("source %q: helm %s: %w", name, where(src), err))
	}
	return snap, nil
}

// where names the chart directory of src in messages.
func where(src v1alpha1.HelmSource) string {
	if src.Source == "" {
		return "chart " + src.Chart + " (a local copy)"
	}
	return fmt.Sprintf("chart %s of source %q", src.Path, src.Source)
}

// lockDep is a dependency to fetch, as Chart.lock pins it.
type lockDep struct{ name, version, repository string }

// unvendored returns the dependencies of the chart in files that are not
// under charts/, as its Chart.lock pins them; one that it does not pin is
// an error naming the chart and the dependency.
func unvendored(c *chart.Chart) ([]lockDep, error) {
	chartName := c.Name()
	have := map[string]bool{}
	for _, sub := range c.Dependencies() {
		have[sub.Name()] = true
	}
	var missing []lockDep
	for _, d := range c.Metadata.Dependencies {
		if have[d.Name] {
			continue
		}
		if c.Lock == nil {
			return nil, fmt.Errorf("chart %s: dependency %q is not under charts/ and there is no Chart.lock to fetch it by: run helm dependency update, or vendor it", chartName, d.Name)
		}
		var pinned *lockDep
		for _, l := range c.Lock.Dependencies {
			if l.Name == d.Name && (d.Repository == "" || l.Repository == d.Repository) {
				pinned = &lockDep{name: l.Name, version: l.Version, repository: l.Repository}
				break
			}
		}
		if pinned == nil {
			return nil, fmt.Errorf("chart %s: dependency %q is not under charts/ nor in Chart.lock: run helm dependency update", chartName, d.Name)
		}
		switch r := pinned.repository; {
		case strings.HasPrefix(r, "https://"), strings.HasPrefix(r, "http://"), strings.HasPrefix(r, "oci://"):
		default:
			return nil, fmt.Errorf("chart %s: dependency %q comes from %q: only https and oci:// repositories are fetched; vendor it under charts/", chartName, d.Name, r)
		}
		missing = append(missing, *pinned)
	}
	return missing, nil
}

// withDependencies returns files with the dependencies its Chart.lock pins
// and charts/ lacks added as charts/NAME-VERSION.tgz, fetched through the
// cache. from is the chart's own repository: auth goes only to
// dependencies of the same repository.
func (f *Fetcher) withDependencies(ctx context.Context, chartName string, files map[string][]byte, from ref, auth *Auth) (map[string][]byte, error) {
	c, err := load(files)
	if err != nil {
		return nil, err
	}
	missing, err := unvendored(c)
	if err != nil || len(missing) == 0 {
		return files, err
	}
	if len(missing) > f.opts.MaxDependencies {
		return nil, fmt.Errorf("%w: chart %s has %d dependencies to fetch, more than %d", ErrLimit, chartName, len(missing), f.opts.MaxDependencies)
	}
	left := f.opts.Limits.MaxBytes
	for _, b := range files {
		left -= int64(len(b))
	}
	out := maps.Clone(files)
	for _, d := range missing {
		r := ref{repo: strings.TrimRight(d.repository, "/"), chart: d.name, version: d.version, insecure: from.insecure || strings.HasPrefix(d.repository, "http://")}
		var depAuth *Auth
		if from.repo != "" && strings.EqualFold(r.repo, from.repo) {
			depAuth = auth
		}
		p, err := f.pull(ctx, r, depAuth)
		if err != nil {
			return nil, fmt.Errorf("chart %s: dependency %s %s from %s: %w", chartName, d.name, d.version, d.repository, err)
		}
		for _, b := range p.files {
			left -= int64(len(b))
		}
		if left < 0 {
			return nil, fmt.Errorf("%w: chart %s with its dependencies is larger than %d bytes unpacked", ErrLimit, chartName, f.opts.Limits.MaxBytes)
		}
		out[path.Join("charts", d.name+"-"+p.version+".tgz")] = p.archive
	}
	return out, nil
}
