// Package charts fetches the charts of helm sources: from a Helm chart
// repository over https (or http with insecure), from an OCI registry
// (oci://), and the dependencies of a chart found in another source.
//
// # What a helm source's snapshot is (the contract the renderer reads)
//
// source.Resolver returns a snapshot for every helm source:
//
//   - chart form (chart, version, repository, secretRef, insecure): Files
//     are the chart's files rooted at the chart directory (Chart.yaml at
//     the root), with every dependency present under charts/ (unpacked
//     directories or .tgz archives, as Helm's loader accepts them);
//     Revision is CHART@VERSION@sha256:DIGEST, DIGEST the sha256 of the
//     chart archive (the same bytes give the same revision from a
//     repository and from a registry); Time is zero.
//   - source form (source: NAME, path: DIR): Files are the subtree DIR of
//     source NAME's snapshot (resolved after the other sources), with the
//     dependencies of Chart.lock that are not vendored under charts/
//     fetched and added as charts/NAME-VERSION.tgz; Revision is
//     CHART@VERSION@ followed by source NAME's revision.
//
// Nothing else is needed to render one: the renderer loads Files as a
// chart.
//
// # Repositories
//
// A repository's index.yaml is fetched with a conditional request
// (If-None-Match with its ETag, If-Modified-Since with its Last-Modified),
// and kept, as the versions of each chart it lists, per repository URL
// and credentials: an unchanged poll is one request answered 304, with no
// index body and no chart. The version is the newest that the source's
// semver range matches (Masterminds semver, as Helm picks it: an exact
// version first, prereleases only for a range that names one; no range is
// the newest stable). Chart archives are cached by digest (the index's
// digest when it gives one, checked against the bytes; else the sha256 of
// the bytes downloaded, which stands in while the index is unchanged) in
// an LRU bounded by Options.MaxCacheBytes, on disk too under
// Options.CacheDir (the CLI's), so a chart at one version is downloaded
// once for every source that uses it. Concurrent reads of one chart,
// range and credentials share one fetch (source.Flights).
//
// # OCI
//
// OCI registries are read with go-containerregistry, not Helm's registry
// client: its calls take a context (Helm's Pull, Tags and Resolve do not),
// it lets a poll ask only a manifest HEAD, and blobs are read through our
// own bounded reader. A range lists the tags (Helm's "_" for "+") and
// picks as above; an exact version is used as the tag. An unchanged poll
// is one tag listing (for a range) and one manifest HEAD; a manifest seen
// before, and a chart layer cached, are not fetched again.
//
// # Credentials
//
// A secretRef's Secret gives username and password (basic auth, to the
// repository's host only: chart URLs of other hosts get none), or for
// oci:// a .dockerconfigjson, and ca.crt for a server a private CA signed.
// Credentials are never sent over plain http to a host other than
// loopback, and never appear in a message: errors name the repository and
// chart, and say "unauthorized" for a 401 or 403.
//
// # Limits
//
// An index is read up to Options.MaxIndexBytes, a chart archive up to
// MaxChartBytes compressed and Limits (files, bytes) unpacked, archives
// of charts/ counted in, nested at most MaxDepth deep; a chart has at most
// MaxDependencies fetched dependencies. An archive entry that leaves its
// directory, a link, or a device, FIFO or other special file is refused.
// Every request has deadlines (connect, TLS, headers within Timeout, the
// body within the fetch's Timeout). With Options.Wait a caller waits that
// long at most, as for git (source.Flights): the fetch goes on in the
// background and the caller gets the source's last snapshot (Pending
// set) or an error wrapping a *source.PendingError, naming the source.
//
// It touches the network and links Helm's chart packages, which import
// client-go: it lives outside the offline core (engine/deps_test.go), in
// helm/, beside the renderer; the resolver reaches it through
// source.HelmFetcher. It must not import controller-runtime.
package charts
