package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// AuditEvent is the part of an API server audit event (audit.k8s.io/v1
// Event) the tests read.
type AuditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// ResponseObject is the object the API server answered with, where
	// the audit policy logs it (level RequestResponse): its labels.
	ResponseObject *AuditObject `json:"responseObject"`
	// RequestReceivedTimestamp is when the API server got the request.
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// AuditObject is the part of an object in an audit event the tests read.
type AuditObject struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

// ReadAudit reads the audit log WithAuditLog wrote.
func ReadAudit(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var ev AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		events = append(events, ev)
	}
	return events, sc.Err()
}
