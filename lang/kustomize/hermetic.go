package kustomize

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrLeavesTree is the error of a kustomization that names a path above
// the root of the tree it is built in.
var ErrLeavesTree = errors.New("leaves the source's tree")

// kustomizationNames are the file names kustomize reads a kustomization from.
var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// remoteRef matches what kustomize would fetch instead of reading the tree:
// URLs, git remotes (git@host:..., git::...) and the host-first shorthand
// of remote bases (github.com/org/repo//path).
var remoteRef = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*://|git@|git::|(github\.com|gitlab\.com|bitbucket\.org)/)`)

// inlineKeys hold text that is not a reference: inline patches and the
// literals of generators.
var inlineKeys = []string{"patch", "literals"}

// checkHermetic refuses a build whose kustomizations refer to anything
// remote: kustomize would fetch it over the network (with the git binary
// or an HTTP client), and a build must read nothing but its sources. It
// follows the kustomization in dir through the directories its resources,
// bases and components name.
func checkHermetic(files map[string][]byte, dir string) error {
	seen := map[string]bool{}
	queue := []string{dir}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if seen[d] {
			continue
		}
		seen[d] = true
		name, doc := readKustomization(files, d)
		if doc == nil {
			continue
		}
		if field, ref, ok := findRemote(doc, ""); ok {
			return fmt.Errorf("%s: %s: remote reference %q: a build reads only its source; fetch the base with a git source of its own", name, field, ref)
		}
		for _, lp := range localPaths(doc) {
			if p := path.Join(d, lp.path); p == ".." || strings.HasPrefix(p, "../") {
				return fmt.Errorf("%s: %s: path %q %w", name, lp.field, lp.path, ErrLeavesTree)
			}
		}
		for _, key := range []string{"resources", "bases", "components"} {
			refs, _ := doc[key].([]any)
			for _, r := range refs {
				if r, ok := r.(string); ok {
					queue = append(queue, path.Join(d, r))
				}
			}
		}
	}
	return nil
}

// readKustomization returns the kustomization of dir, parsed, and its
// file's name; nil when dir has none (or kustomize will fail to parse it).
func readKustomization(files map[string][]byte, dir string) (string, map[string]any) {
	for _, n := range kustomizationNames {
		name := path.Join(dir, n)
		b, ok := files[name]
		if !ok {
			continue
		}
		var doc map[string]any
		if yaml.Unmarshal(b, &doc) != nil {
			return name, nil
		}
		return name, doc
	}
	return "", nil
}

// findRemote walks a parsed kustomization for a string that names
// something remote, and returns its field path.
func findRemote(v any, at string) (field, ref string, ok bool) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(v) {
			if slices.Contains(inlineKeys, k) {
				continue
			}
			if f, r, ok := findRemote(v[k], join(at, k)); ok {
				return f, r, true
			}
		}
	case []any:
		for i, e := range v {
			if f, r, ok := findRemote(e, at+"["+strconv.Itoa(i)+"]"); ok {
				return f, r, true
			}
		}
	case string:
		if remoteRef.MatchString(v) {
			return at, v, true
		}
	}
	return "", "", false
}

func join(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// pathLists are the kustomization fields that list files or directories.
var pathLists = []string{"resources", "bases", "components", "crds", "patchesStrategicMerge", "transformers", "generators", "validators", "configurations"}

// localPath is a file or directory a kustomization names, and its field.
type localPath struct{ field, path string }

// localPaths lists the files and directories a kustomization reads: the
// lists of pathLists, the path of patches, replacements and openapi, and
// the files and env files of generators. kustomize resolves them in its
// in-memory tree, where a path above the root would land back inside it
// ("/../x" is "/x"), so checkHermetic refuses one that leaves the tree.
func localPaths(doc map[string]any) []localPath {
	var out []localPath
	add := func(field string, v any) {
		// An inline patch is YAML text, not a path.
		if s, ok := v.(string); ok && s != "" && !strings.Contains(s, "\n") {
			out = append(out, localPath{field, s})
		}
	}
	for _, key := range pathLists {
		l, _ := doc[key].([]any)
		for i, v := range l {
			add(key+"["+strconv.Itoa(i)+"]", v)
		}
	}
	for _, key := range []string{"patches", "patchesJson6902", "replacements"} {
		l, _ := doc[key].([]any)
		for i, v := range l {
			if m, ok := v.(map[string]any); ok {
				add(key+"["+strconv.Itoa(i)+"].path", m["path"])
			}
		}
	}
	if m, ok := doc["openapi"].(map[string]any); ok {
		add("openapi.path", m["path"])
	}
	for _, key := range []string{"configMapGenerator", "secretGenerator"} {
		l, _ := doc[key].([]any)
		for i, v := range l {
			g, _ := v.(map[string]any)
			at := key + "[" + strconv.Itoa(i) + "]"
			add(at+".env", g["env"])
			for _, f := range []string{"files", "envs"} {
				fl, _ := g[f].([]any)
				for j, e := range fl {
					s, _ := e.(string)
					if _, p, ok := strings.Cut(s, "="); ok && f == "files" {
						s = p // key=path
					}
					add(at+"."+f+"["+strconv.Itoa(j)+"]", s)
				}
			}
		}
	}
	return out
}
