// Package git provides the snapshot of a Git source: the files of one
// subtree of a repository at one revision, fetched with go-git over https,
// http, ssh or git://.
//
// # Refs
//
// A source names a branch, a tag, a semver range over tags or a commit;
// when several are set the most specific wins (commit, then semver, then
// tag, then branch), and with none the remote's HEAD is used. The snapshot's
// Revision names what was resolved, in the form Flux uses:
//
//	main@sha1:<hash>     a branch
//	v1.2.0@sha1:<hash>   a tag, or the tag a semver range selected
//	HEAD@sha1:<hash>     the remote's default branch
//	sha1:<hash>          a pinned commit
//
// A semver range (Masterminds/semver syntax, such as ">=1.2 <2") selects
// the highest tag it matches; tags may start with "v", tags that are not
// versions are ignored, and prereleases match only a range that names one.
// A pinned commit is 7 to 40 hexadecimal digits. The hash in a revision is
// always that of the commit (an annotated tag is peeled), and the
// snapshot's Time is the commit's committer time in UTC.
//
// # Cache
//
// A Fetcher keeps one repository per remote URL (normalised: credentials
// dropped, scheme and host lower-cased, default port removed), in memory or
// as a bare repository under Options.CacheDir, and fetches into it. Every
// Fetch opens one upload-pack session: the refs the server advertises are
// the ref listing (what ls-remote shows), read with the caller's
// credentials, so cached content is only served to callers the remote
// still lets in. Then:
//
//   - if the cache holds the commit the ref names, nothing more is asked:
//     an unchanged remote costs exactly one ref listing and no fetch;
//   - else the commit is fetched with depth 1 on the same session (one
//     connection over ssh and git://, one more request over http), offering
//     the tips of the cached refs as haves and asking for a thin pack, so
//     that only objects the cache lacks travel;
//   - a pinned commit is looked up by prefix among the cached commits;
//     failing that, it is fetched like a ref when it is a ref's tip, by its
//     full hash with depth 1 when the server allows that
//     (uploadpack.allowReachableSHA1InWant), and otherwise, as always for a
//     short hash that is no tip, by fetching every branch and tag with full
//     history (deepening the cache if it is shallow).
//
// go-git's Remote.Fetch is not used: it never asks for a thin pack, and a
// server answering a shallow fetch without one sends the whole tree of the
// new commit again.
//
// The snapshot built for a (URL, ref, path) is kept with its commit, so a
// poll that finds the same commit does not read the tree again. Returned
// snapshots share file contents with the cache: callers must not modify
// the byte slices.
//
// Callers of one source (URL, ref and path) with the same credentials
// share one fetch; fetches of one URL take turns; different URLs proceed
// in parallel. Every step with the server has a deadline within
// Options.Timeout (transport.go), and a fetch that outlives it is
// abandoned by Fetch. With Options.Wait a caller waits that long at most:
// the fetch goes on in the background and the caller gets the source's
// last snapshot (Snapshot.Pending set) or a *PendingError. A cache found
// to miss objects (a fetch cut short) is dropped and filled again.
//
// # Limits
//
// Every object a server sends is size-checked from its pack header before
// go-git sees it (pack.go): one over Options.MaxFileBytes, or a fetch over
// Options.MaxCacheBytes, fails the fetch, naming the file when the pack's
// trees do. The cache holds at most Options.MaxCacheBytes in memory, least
// recently used repositories dropped first, and Keep drops those no
// caller names. Error pages of http servers are replaced by their status.
//
// # Safety
//
// Over ssh the host key is checked against the source's known_hosts, and a
// source without known_hosts is refused. Credentials are never sent over
// plain http to a host other than loopback, and local (file://) URLs are
// refused. Error messages name the source, the URL without credentials and
// the ref, and never contain a password or token. Hidden files and
// directories, symbolic links and submodules are left out of snapshots.
//
// # Verification
//
// A source with verify (FetchVerified, Provider.Keys) is read only when
// the commit it resolves to (mode HEAD), the annotated tag it reads (Tag)
// or both (TagAndHEAD) carry a signature by one of the keys of its Secret
// (ParseKeys: armored OpenPGP keys, authorized_keys lines): OpenPGP through
// go-git's Commit.Verify and Tag.Verify, SSH (SSHSIG, namespace git)
// through github.com/hiddeco/sshsig. The check runs before any file of the
// commit is read; a failure is a *source.VerifyError naming the commit or
// tag and the Secret, never a key. Verdicts are kept per object and keys,
// and a fetch with verify shares nothing with one without it or with other
// keys.
//
// # A local repository
//
// Commit reads one commit of a repository on disk from its objects alone,
// never its working tree or index, for engine diff --base: its files, and
// snapshots of its directories built as source.Dir builds those of the
// working tree (revision the digest of the content), with hidden files,
// symbolic links and submodules left out as above and paths outside the
// repository refused.
//
// Like the rest of engine it must not import client-go or
// controller-runtime.
package git
