package harness

import "github.com/manifestsync/manifestsync/operator/testenv"

// The API server's own request counts (apiserver_request_total), which
// workloads count instead of trusting the code under test: the same
// reading the operator's tests make.
type (
	// APIRequest is a class of requests as the API server labels them.
	APIRequest = testenv.Request
	// APIRequests are the API server's request counts by class.
	APIRequests = testenv.Requests
)

// ReadAPIRequests reads the API server's request counts from its /metrics.
var ReadAPIRequests = testenv.ReadRequests
