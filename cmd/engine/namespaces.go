package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// namespaceFlags give the cluster's namespaces offline, for the targets
// with a namespaceSelector: --namespaces FILE and --namespace NAME[,K=V...];
// and a remote cluster's, for its targets: --cluster-namespaces
// SECRET[/KEY]=FILE.
type namespaceFlags struct {
	files    []string
	items    []string
	clusters []string
}

// givenNamespaces are the namespaces the flags give: this cluster's (nil
// when no flag gives them) and each remote cluster's, by engine.ClusterID.
type givenNamespaces struct {
	local    []engine.Namespace
	clusters map[string][]engine.Namespace
}

// options are the namespaces to evaluate spec with: the remote clusters'
// of its namespaceSelector targets are those given, else fallback's (none
// when fallback is nil: such a target is an error).
func (g givenNamespaces) options(spec *v1alpha1.ManifestSyncSpec, fallback []engine.Namespace) map[string][]engine.Namespace {
	out := map[string][]engine.Namespace{}
	for _, t := range spec.Targets {
		if t.Cluster == nil || t.NamespaceSelector == nil {
			continue
		}
		id := engine.ClusterID(t.Cluster)
		if nss, ok := g.clusters[id]; ok {
			out[id] = nss
		} else if fallback != nil {
			out[id] = fallback
		}
	}
	return out
}

// missingCluster names the first namespaceSelector target of spec (of
// only, when given) whose remote cluster's namespaces g lacks, and the
// flag that gives them.
func (g givenNamespaces) missingCluster(spec *v1alpha1.ManifestSyncSpec, only []string) (target, flag string) {
	for _, t := range spec.Targets {
		if t.Cluster == nil || t.NamespaceSelector == nil || (len(only) > 0 && !slices.Contains(only, t.Name)) {
			continue
		}
		if _, ok := g.clusters[engine.ClusterID(t.Cluster)]; !ok {
			return t.Name, "--cluster-namespaces " + engine.ClusterID(t.Cluster) + "=FILE"
		}
	}
	return "", ""
}

const namespacesUsage = "--namespaces FILE (what kubectl get namespaces -o yaml prints) or --namespace NAME[,KEY=VALUE...]"

func addNamespaceFlags(fl *pflag.FlagSet, f *namespaceFlags) {
	fl.StringArrayVar(&f.files, "namespaces", nil, "FILE: the cluster's namespaces for namespaceSelector targets, as kubectl get namespaces -o yaml (or -o json) prints them, or Namespace documents; - reads stdin (repeatable)")
	fl.StringArrayVar(&f.items, "namespace", nil, "NAME[,KEY=VALUE...]: a namespace of the cluster and its labels, for namespaceSelector targets (repeatable)")
	fl.StringArrayVar(&f.clusters, "cluster-namespaces", nil, "SECRET[/KEY]=FILE: the namespaces of the remote cluster whose kubeconfig is key KEY (default value) of Secret SECRET, for its namespaceSelector targets, as --namespaces reads them (repeatable)")
}

// given reports whether any namespace was given, even an empty file.
func (f *namespaceFlags) given() bool { return len(f.files) > 0 || len(f.items) > 0 }

// load reads the namespaces the flags give: nil when no flag is given, so
// that namespaceSelector targets stay errors; an empty list is a cluster
// with no namespaces. A namespace named twice is an error, wherever the two
// are. Errors are usage errors naming the file and line or the flag value.
// Files and stdin are read within timeout (--timeout; see readWithin).
func (f *namespaceFlags) load(ctx context.Context, timeout time.Duration, stdin io.Reader) (givenNamespaces, error) {
	ctx, timeout, cancel := readDeadline(ctx, timeout)
	defer cancel()
	stdinRead := false
	read := func(flag, name string) ([]placedNamespace, error) {
		var (
			data []byte
			err  error
		)
		display := name
		if name == "-" {
			if stdinRead {
				return nil, usageErr("%s -: stdin is given twice", flag)
			}
			stdinRead = true
			display = "<stdin>"
			data, err = readWithin(ctx, timeout, "stdin", func(context.Context) ([]byte, error) { return io.ReadAll(stdin) })
		} else {
			data, err = readUserFile(ctx, timeout, name)
		}
		if err != nil {
			return nil, usageErr("%s %s: %w", flag, name, err)
		}
		found, err := parseNamespaces(display, data)
		if err != nil {
			return nil, usageErr("%s %w", flag, err)
		}
		return found, nil
	}
	var (
		g   givenNamespaces
		err error
	)
	if g.local, err = f.loadLocal(read); err != nil {
		return g, err
	}
	for _, c := range f.clusters {
		id, file, ok := strings.Cut(c, "=")
		if !ok || id == "" || file == "" {
			return g, usageErr("--cluster-namespaces %s: want SECRET[/KEY]=FILE", c)
		}
		if !strings.Contains(id, "/") {
			id += "/value"
		}
		if _, dup := g.clusters[id]; dup {
			return g, usageErr("--cluster-namespaces %s: cluster %s is given twice", c, id)
		}
		found, err := read("--cluster-namespaces", file)
		if err != nil {
			return g, err
		}
		var list namespaceList
		for _, ns := range found {
			if err := list.add(ns.at, ns.Namespace); err != nil {
				return g, err
			}
		}
		if g.clusters == nil {
			g.clusters = map[string][]engine.Namespace{}
		}
		g.clusters[id] = list.items()
	}
	return g, nil
}

// namespaceList is one cluster's namespaces as the flags give them, each
// once.
type namespaceList struct {
	out   []engine.Namespace
	where map[string]string // namespace name: where it was given
}

func (l *namespaceList) add(at string, ns engine.Namespace) error {
	if first, ok := l.where[ns.Name]; ok {
		return usageErr("%s: namespace %q is given twice (first at %s)", at, ns.Name, first)
	}
	if l.where == nil {
		l.where = map[string]string{}
	}
	l.where[ns.Name] = at
	l.out = append(l.out, ns)
	return nil
}

// items are the namespaces added: an empty list, not nil, when none was.
func (l *namespaceList) items() []engine.Namespace {
	if l.out == nil {
		return []engine.Namespace{}
	}
	return l.out
}

// loadLocal reads the namespaces of this cluster that the flags give.
func (f *namespaceFlags) loadLocal(read func(flag, name string) ([]placedNamespace, error)) ([]engine.Namespace, error) {
	if !f.given() {
		return nil, nil
	}
	var list namespaceList
	for _, name := range f.files {
		found, err := read("--namespaces", name)
		if err != nil {
			return nil, err
		}
		for _, ns := range found {
			if err := list.add(ns.at, ns.Namespace); err != nil {
				return nil, err
			}
		}
	}
	for _, item := range f.items {
		ns, err := parseNamespaceFlag(item)
		if err != nil {
			return nil, usageErr("--namespace %s: %w", item, err)
		}
		if err := list.add("--namespace "+item, ns); err != nil {
			return nil, err
		}
	}
	return list.items(), nil
}

// parseNamespaceFlag reads NAME[,KEY=VALUE...].
func parseNamespaceFlag(item string) (engine.Namespace, error) {
	parts := strings.Split(item, ",")
	ns := engine.Namespace{Name: parts[0], Labels: map[string]string{}}
	if err := checkNamespaceName(ns.Name); err != nil {
		return ns, err
	}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return ns, fmt.Errorf("label %q: want KEY=VALUE", kv)
		}
		if _, dup := ns.Labels[k]; dup {
			return ns, fmt.Errorf("label %q is given twice", k)
		}
		if err := checkLabel(k, v); err != nil {
			return ns, err
		}
		ns.Labels[k] = v
	}
	return ns, nil
}

// placedNamespace is a namespace read from a file, with its place there.
type placedNamespace struct {
	engine.Namespace
	at string // FILE:LINE
}

// parseNamespaces reads the namespaces of a file named name: YAML or JSON
// documents, each a List or NamespaceList (what kubectl get namespaces
// prints) or a Namespace. Errors start with name:line.
func parseNamespaces(name string, data []byte) ([]placedNamespace, error) {
	var out []placedNamespace
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
			continue
		}
		root := doc.Content[0]
		at := func(n *yaml.Node) string { return fmt.Sprintf("%s:%d", name, n.Line) }
		kind, err := kindOf(root, false)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(root), err)
		}
		var items []*yaml.Node
		switch kind {
		case "Namespace":
			items = []*yaml.Node{root}
		case "List", "NamespaceList":
			list := engine.MapValue(root, "items")
			if list == nil || list.Tag == "!!null" {
				continue
			}
			if list.Kind != yaml.SequenceNode {
				return nil, fmt.Errorf("%s: items: want a list", at(list))
			}
			items = list.Content
		default:
			return nil, fmt.Errorf("%s: a %s, want a Namespace, a NamespaceList or a List of Namespaces", at(root), kind)
		}
		for i, item := range items {
			field := ""
			if kind != "Namespace" {
				field = fmt.Sprintf("items[%d]: ", i)
			}
			ns, line, err := namespaceOf(item, kind != "Namespace")
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %s%w", name, line, field, err)
			}
			out = append(out, placedNamespace{Namespace: ns, at: at(item)})
		}
	}
}

// kindOf is the kind of a Kubernetes object's node; an item of a list
// may leave it out (those of the API server's NamespaceList do).
func kindOf(n *yaml.Node, item bool) (string, error) {
	if n.Kind != yaml.MappingNode {
		return "", errors.New("not an object")
	}
	if v := engine.MapValue(n, "apiVersion"); v != nil && v.Value != "v1" {
		return "", fmt.Errorf("apiVersion %q, want v1", v.Value)
	}
	k := engine.MapValue(n, "kind")
	switch {
	case k != nil && k.Kind == yaml.ScalarNode && k.Value != "":
		return k.Value, nil
	case item:
		return "Namespace", nil
	}
	return "", errors.New("no kind")
}

// namespaceOf reads the name and labels of a Namespace's node, a
// document of its own or an item of a list. An error comes with the line
// it is about.
func namespaceOf(n *yaml.Node, item bool) (engine.Namespace, int, error) {
	var ns engine.Namespace
	kind, err := kindOf(n, item)
	if err != nil {
		return ns, n.Line, err
	}
	if kind != "Namespace" {
		return ns, n.Line, fmt.Errorf("a %s, want a Namespace", kind)
	}
	md := engine.MapValue(n, "metadata")
	if md == nil || md.Kind != yaml.MappingNode {
		return ns, n.Line, errors.New("metadata: want an object")
	}
	if name := engine.MapValue(md, "name"); name != nil {
		if name.Kind != yaml.ScalarNode {
			return ns, name.Line, errors.New("metadata.name: want a string")
		}
		ns.Name = name.Value
	}
	if ns.Name == "" {
		return ns, engine.FieldLine(n, "metadata"), errors.New("metadata.name: missing")
	}
	if err := checkNamespaceName(ns.Name); err != nil {
		return ns, engine.FieldLine(n, "metadata.name"), fmt.Errorf("metadata.name: %w", err)
	}
	ns.Labels = map[string]string{}
	if labels := engine.MapValue(md, "labels"); labels != nil && labels.Tag != "!!null" {
		if labels.Kind != yaml.MappingNode {
			return ns, labels.Line, errors.New("metadata.labels: want an object")
		}
		for i := 0; i+1 < len(labels.Content); i += 2 {
			k, v := labels.Content[i], labels.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return ns, v.Line, fmt.Errorf("metadata.labels[%s]: want a string", k.Value)
			}
			if err := checkLabel(k.Value, v.Value); err != nil {
				return ns, k.Line, fmt.Errorf("metadata.labels: %w", err)
			}
			ns.Labels[k.Value] = v.Value
		}
	}
	return ns, 0, nil
}

// checkNamespaceName refuses what the API server refuses as a namespace name.
func checkNamespaceName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("namespace name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// checkLabel refuses what the API server refuses as a label.
func checkLabel(k, v string) error {
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return fmt.Errorf("label %s: value %q: %s", k, v, strings.Join(errs, "; "))
	}
	return nil
}

// selectorTargets names the targets with a namespaceSelector among those
// evaluated (all when only is empty).
// localSelectorTargets are those of selectorTargets that write to this
// cluster.
func localSelectorTargets(spec *v1alpha1.ManifestSyncSpec, only []string) []string {
	return slices.DeleteFunc(selectorTargets(spec, only), func(name string) bool {
		return slices.ContainsFunc(spec.Targets, func(t v1alpha1.Target) bool { return t.Name == name && t.Cluster != nil })
	})
}

func selectorTargets(spec *v1alpha1.ManifestSyncSpec, only []string) []string {
	var out []string
	for _, t := range spec.Targets {
		if t.NamespaceSelector != nil && (len(only) == 0 || slices.Contains(only, t.Name)) {
			out = append(out, t.Name)
		}
	}
	return out
}

// unmatchedSelectors names the selector targets of names that res has no
// namespace of: their selector matched none of the namespaces given.
func unmatchedSelectors(names []string, res *engine.Result) []string {
	var out []string
	for _, name := range names {
		if !slices.ContainsFunc(res.Targets, func(t *engine.TargetResult) bool { return t.Selected && t.Name == name }) {
			out = append(out, name)
		}
	}
	return out
}
