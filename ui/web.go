package ui

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// web holds the page templates, the script and the stylesheet, built into
// the binary.
//
//go:embed web/*.html web/app.js web/app.css web/favicon.svg
var web embed.FS

// pageNames are the templates of whole pages; each defines "main" and is
// drawn inside layout.html.
var pageNames = []string{"overview", "ms", "login", "confirm", "error"}

var (
	templatesOnce sync.Once
	templatesErr  error
	templates     map[string]*template.Template
)

// parseTemplates parses the pages once.
func parseTemplates() error {
	templatesOnce.Do(func() {
		m := map[string]*template.Template{}
		for _, name := range pageNames {
			t, err := template.New(name).Funcs(funcs).ParseFS(web, "web/layout.html", "web/"+name+".html")
			if err != nil {
				templatesErr = fmt.Errorf("ui: template %s: %w", name, err)
				return
			}
			m[name] = t
		}
		templates = m
	})
	return templatesErr
}

// staticHandler serves app.js, app.css and the icon.
func staticHandler() http.Handler {
	sub, err := fs.Sub(web, "web")
	if err != nil {
		panic(err) // the embedded directory is there by construction
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "app.js", "app.css", "favicon.svg":
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

var funcs = template.FuncMap{
	"short": v1alpha1.ShortRevision,
	"when": func(t any) string {
		var tm time.Time
		switch v := t.(type) {
		case *metav1.Time:
			if v == nil {
				return ""
			}
			tm = v.Time
		case metav1.Time:
			tm = v.Time
		case time.Time:
			tm = v
		}
		if tm.IsZero() {
			return ""
		}
		return tm.UTC().Format(time.RFC3339)
	},
	"ago": func(t any) string {
		var tm time.Time
		switch v := t.(type) {
		case *metav1.Time:
			if v == nil {
				return "never"
			}
			tm = v.Time
		case metav1.Time:
			tm = v.Time
		}
		if tm.IsZero() {
			return "never"
		}
		d := time.Since(tm)
		switch {
		case d < time.Minute:
			return fmt.Sprintf("%ds ago", max(int(d.Seconds()), 0))
		case d < time.Hour:
			return fmt.Sprintf("%dm ago", int(d.Minutes()))
		case d < 48*time.Hour:
			return fmt.Sprintf("%dh ago", int(d.Hours()))
		}
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	},
	"lower": strings.ToLower,
	"objectName": func(kind, ns, name string) string {
		if ns == "" {
			return kind + " " + name
		}
		return kind + " " + ns + "/" + name
	},
	"firstLine": func(s string) string {
		s, _, _ = strings.Cut(s, "\n")
		return s
	},
}
