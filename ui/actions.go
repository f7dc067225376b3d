package ui

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/history"
	"github.com/manifestsync/manifestsync/operator/webhook"
)

// actionInfo says how an action is named, confirmed and recorded.
type actionInfo struct {
	Label   string // the button's text
	Confirm string // the question
	Reason  string // the Event's reason
}

var actions = map[string]actionInfo{
	"sync":     {"Sync now", "Request a sync of %s now?", "UISync"},
	"suspend":  {"Suspend", "Suspend %s? The operator stops reconciling it until it is resumed.", "UISuspend"},
	"resume":   {"Resume", "Resume %s?", "UIResume"},
	"rollback": {"Roll back", "Roll %s back to history entry %d? Its git sources are pinned to that entry's commits.", "UIRollback"},
	"undo":     {"Undo rollback", "Undo the rollback of %s? Its git sources follow their refs again.", "UIUndo"},
}

type confirmData struct {
	Action   string
	Info     actionInfo
	Question string
	URL      string // where the form posts
	Back     string
	Entry    string
}

// action does an action on a ManifestSync with the user's rights, once
// confirmed (form field confirm=yes; the script asks in a dialog, without
// it a confirmation page asks), records an Event naming the user, and
// shows the ManifestSync's page with the outcome in #flash: the API
// server's own message when it refused (403 when forbidden).
func (s *Server) action(w http.ResponseWriter, r *http.Request, c *caller) {
	ns, name, act := r.PathValue("ns"), r.PathValue("name"), r.PathValue("action")
	info, ok := actions[act]
	if !ok {
		http.Error(w, "unknown action", http.StatusNotFound)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read", http.StatusBadRequest)
		return
	}
	entry := -1
	if act == "rollback" {
		n, err := strconv.Atoi(r.PostForm.Get("entry"))
		if err != nil || n < 0 || n > 100 {
			http.Error(w, "rollback needs a history entry", http.StatusBadRequest)
			return
		}
		entry = n
	}
	target := ns + "/" + name
	if r.PostForm.Get("confirm") != "yes" {
		q := fmt.Sprintf(info.Confirm, target)
		if entry >= 0 {
			q = fmt.Sprintf(info.Confirm, target, entry)
		}
		d := confirmData{Action: act, Info: info, Question: q, URL: r.URL.Path, Back: msURL(ns, name)}
		if entry >= 0 {
			d.Entry = strconv.Itoa(entry)
		}
		s.render(w, r, http.StatusOK, "confirm", &page{Title: info.Label, User: c.id.Name, Self: msURL(ns, name), Data: d})
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	key := client.ObjectKey{Namespace: ns, Name: name}
	done, err := s.do(ctx, c, key, act, entry)
	status := http.StatusOK
	var fl *flash
	if err != nil {
		fl = &flash{Error: true, Text: apiMessage(err)}
		status = statusOf(err)
		if !isAPIError(err) {
			status = http.StatusBadRequest // the action could not be done as asked (no such history entry)
		}
		s.log.Info("a UI action failed", "user", c.id.Name, "action", act, "manifestSync", target, "error", fl.Text)
	} else {
		fl = &flash{Text: done}
		s.record(ctx, c, key, info.Reason, fmt.Sprintf("%s by %s in the web UI: %s", info.Label, c.id.Name, done))
		s.log.Info("a UI action", "user", c.id.Name, "action", act, "manifestSync", target)
	}
	tab := "tree"
	if act == "rollback" || act == "undo" {
		tab = "history"
	}
	s.showMS(w, r, c, tab, status, fl)
}

// do carries the action out as the user and says what it did.
func (s *Server) do(ctx context.Context, c *caller, key client.ObjectKey, act string, entry int) (string, error) {
	ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	patch := func(v any) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return c.client.Patch(ctx, ms, client.RawPatch(types.MergePatchType, raw))
	}
	switch act {
	case "sync":
		now := time.Now().UTC().Format(time.RFC3339Nano)
		if err := patch(map[string]any{"metadata": map[string]any{"annotations": map[string]string{webhook.RequestedAtAnnotation: now}}}); err != nil {
			return "", err
		}
		return "A sync was requested.", nil
	case "suspend", "resume":
		if err := patch(map[string]any{"spec": map[string]any{"suspend": act == "suspend"}}); err != nil {
			return "", err
		}
		if ms.Spec.Suspend {
			return "Suspended: the operator leaves it alone until it is resumed.", nil
		}
		return "Resumed.", nil
	case "rollback":
		res, err := history.Rollback(ctx, c.client, key, entry)
		if err != nil {
			return "", err
		}
		msg := fmt.Sprintf("Rolled back to history entry %d", entry)
		if res.Entry != nil {
			msg += " (" + v1alpha1.ShortRevision(res.Entry.Revision) + ")"
		}
		return msg + "." + notes(res), nil
	case "undo":
		res, err := history.Undo(ctx, c.client, key)
		if err != nil {
			return "", err
		}
		if len(res.Changes) == 0 {
			return "Nothing to undo." + notes(res), nil
		}
		return "The rollback was undone." + notes(res), nil
	}
	return "", fmt.Errorf("unknown action %q", act)
}

// isAPIError reports whether err is the API server's answer.
func isAPIError(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st)
}

func notes(res *history.Result) string {
	if res == nil || len(res.Notes) == 0 {
		return ""
	}
	return " " + strings.Join(res.Notes, " ")
}

// record leaves a core/v1 Event on the ManifestSync naming the user: in
// ModeCluster with the operator's client (users often may not create
// events), in ModeLocal with the user's. A failure is only logged.
func (s *Server) record(ctx context.Context, c *caller, key client.ObjectKey, reason, message string) {
	ms := &v1alpha1.ManifestSync{}
	if err := c.client.Get(ctx, key, ms); err != nil {
		s.log.Info("cannot record the UI action's event", "manifestSync", key.String(), "error", apiMessage(err))
		return
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name[:min(len(key.Name), 200)] + "." + hex.EncodeToString(b)},
		InvolvedObject: corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ManifestSync",
			Namespace: key.Namespace, Name: key.Name, UID: ms.UID, ResourceVersion: ms.ResourceVersion},
		Reason: reason, Message: message, Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "manifestsync-ui"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "manifestsync.dev/ui", ReportingInstance: "manifestsync-ui",
	}
	if len(ev.Message) > 1024 {
		ev.Message = ev.Message[:1024]
	}
	writer := c.client
	if s.opts.Mode == ModeCluster {
		writer = s.base
	}
	if err := writer.Create(ctx, ev); err != nil {
		s.log.Info("cannot record the UI action's event", "manifestSync", key.String(), "error", apiMessage(err))
	}
}
