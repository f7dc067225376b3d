package webhook

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// requestsTotal counts the receiver's answers by status code: refusals are
// logged only at debug level (a flood would fill the log), so a flood shows
// here (429, 503, 401, 404, 413).
var requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "manifestsync_webhook_requests_total",
	Help: "Webhook calls answered, by HTTP status code.",
}, []string{"code"})

func init() {
	ctrlmetrics.Registry.MustRegister(requestsTotal)
}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// count counts the answer w gave.
func (w *statusWriter) count() {
	requestsTotal.WithLabelValues(strconv.Itoa(w.code)).Inc()
}
