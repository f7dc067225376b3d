// Package httpsrc reads configuration published as an archive at an http(s)
// URL: a tar+gzip or a zip, pinned by its sha256 digest, extracted with the
// same rules as an OCI artifact's layer (package oci). It is the ground of
// the `http: {url, digest, secretRef}` source: the caller reads the Secret
// and gives the credentials; Fetch returns the files and the validators of
// the next poll.
//
// # Polls
//
// Fetch sends a conditional GET (If-None-Match from the last ETag,
// If-Modified-Since from the last Last-Modified), so an unchanged poll is
// answered 304 Not Modified and downloads no body. The conditions are left
// out when the digest asked for is not the one fetched last, so a changed
// pin is always checked against the bytes.
//
// # What a hostile server can do
//
// The URL must be https; plain http is read only from a loopback host and
// only when Insecure, and is refused before any request otherwise.
// Credentials (basic auth or a bearer token) are added to a request only
// when it goes to the URL's own scheme and host:port, so they never follow
// a redirect to another host (net/http alone would send them to a
// subdomain or another port); at most 5 redirects are followed. The body is
// read within Limits.MaxBodyBytes whatever Content-Length says, and the
// whole call within Limits.Timeout. The body's sha256 must be Source.Digest
// (required unless Insecure) before anything is extracted. A tar+gzip is
// unpacked by oci.Unpack; a zip by the equivalent rules: an entry that is
// absolute or leaves the directory, a symbolic link, a device or other
// special file, an encrypted entry or a name given twice is refused, naming
// the entry, and the files are bounded in number and in unpacked size (each
// entry's declared size is checked before it is read and its actual bytes
// are read within what is left).
//
// Errors name the URL without its userinfo, query or fragment (a token in
// a query string must not leak) and say what the server answered by its
// status only, never its body.
//
// It does network I/O, so it lives outside the offline core (lang, stdlib,
// engine: engine/deps_test.go); it must not import the operator,
// controller-runtime or client-go.
package httpsrc
