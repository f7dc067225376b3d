// Command k8sgen turns the output of `cue get go` for the k8s.io/api Go
// types (see hack/gen-k8s-schemas.sh) into the builtin k8s CUE schemas: one
// CUE package, k8s, with an index file defining #<Kind> for every kind of
// the API groups below, pinned to its apiVersion, and #Object.
//
// `cue get go` (cuelang.org/go v0.17.1) leaves three things that do not
// match the JSON the API server accepts; k8sgen derives the fix for each
// from the Go types themselves:
//
//   - an embedded struct tagged `json:""` (k8s.io/api v0.37 tags TypeMeta,
//     VolumeSource and others so) becomes a field named after its type
//     instead of being embedded, as encoding/json does;
//   - a type with its own JSON encoding (Quantity, IntOrString, Time, ...)
//     becomes `_`; its OpenAPI schema methods say what it really is;
//   - []byte becomes `bytes`, but on the wire it is a base64 string.
//
// It then flattens the Go packages into the one CUE package: #Container of
// k8s.io/api/core/v1 becomes #core_v1_Container, and references follow.
// With CUE v0.17, every reference into an imported package costs time in
// proportion to that package's size, on every evaluation, and core/v1 is
// large: without imports, validating a Deployment is several times faster.
// (It also keeps the tree loadable from an fs.FS, where CUE v0.17 cannot
// import from cue.mod/gen.)
//
// Usage: k8sgen -packages lists the Go packages to give cue get go;
// k8sgen GENDIR OUTDIR then writes the package into OUTDIR, GENDIR being
// cue.mod/gen of the module cue get go wrote into.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/ast/astutil"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// groups are the API groups whose kinds the index defines; `k8sgen
// -packages` lists their Go packages for `cue get go`.
var groups = []func(*runtime.Scheme) error{
	corev1.AddToScheme,
	appsv1.AddToScheme,
	batchv1.AddToScheme,
	networkingv1.AddToScheme,
	rbacv1.AddToScheme,
	policyv1.AddToScheme,
	autoscalingv2.AddToScheme,
}

// base64 is what a []byte is in JSON.
const base64 = `string & =~"^[A-Za-z0-9+/]*={0,2}$"`

const metaV1 = "k8s.io/apimachinery/pkg/apis/meta/v1"

type kind struct {
	name       string // the Kind, also the index's definition name
	apiVersion string
	typ        reflect.Type
}

// fixes are what k8sgen changes in the generated packages, by import
// path and definition name.
type fixes struct {
	embeds map[string]map[string][]string // fields to embed
	types  map[string]map[string]string   // new values for definitions of `_`
	seen   map[reflect.Type]bool
}

func main() {
	var err error
	switch {
	case len(os.Args) == 2 && os.Args[1] == "-packages":
		err = listPackages()
	case len(os.Args) == 3:
		err = run(os.Args[1], os.Args[2])
	default:
		fmt.Fprintln(os.Stderr, "usage: k8sgen -packages | k8sgen GENDIR OUTDIR")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8sgen:", err)
		os.Exit(1)
	}
}

// listPackages prints the Go packages of the groups, for cue get go.
func listPackages() error {
	scheme := runtime.NewScheme()
	for _, add := range groups {
		if err := add(scheme); err != nil {
			return err
		}
	}
	pkgs := map[string]bool{}
	for gvk, t := range scheme.AllKnownTypes() {
		if gvk.Version != runtime.APIVersionInternal && strings.HasPrefix(t.PkgPath(), "k8s.io/api/") {
			pkgs[t.PkgPath()] = true
		}
	}
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		fmt.Println(p)
	}
	return nil
}

// file is one generated file of package pkg.
type file struct {
	pkg  string
	name string
	ast  *ast.File
}

func run(gen, out string) error {
	scheme := runtime.NewScheme()
	for _, add := range groups {
		if err := add(scheme); err != nil {
			return err
		}
	}
	kinds, err := resourceKinds(scheme)
	if err != nil {
		return err
	}
	fx := &fixes{embeds: map[string]map[string][]string{}, types: map[string]map[string]string{}, seen: map[reflect.Type]bool{}}
	for _, t := range scheme.AllKnownTypes() {
		if err := fx.walk(t); err != nil {
			return err
		}
	}
	var files []file
	err = filepath.WalkDir(gen, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".cue") {
			return err
		}
		rel, err := filepath.Rel(gen, filepath.Dir(p))
		if err != nil {
			return err
		}
		f, err := fx.rewrite(p, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		files = append(files, file{pkg: filepath.ToSlash(rel), name: filepath.Base(p), ast: f})
		return nil
	})
	if err != nil {
		return err
	}
	if err := flatten(files); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		src, err := format.Node(f.ast)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", f.pkg, f.name, err)
		}
		if err := os.WriteFile(filepath.Join(out, alias(f.pkg)+"_"+f.name), src, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(out, "k8s.cue"), index(kinds), 0o644)
}

// resourceKinds lists the kinds with object metadata of the groups.
func resourceKinds(scheme *runtime.Scheme) ([]kind, error) {
	objectMeta := reflect.TypeFor[metav1.ObjectMeta]()
	byName := map[string]kind{}
	for gvk, t := range scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") ||
			!strings.HasPrefix(t.PkgPath(), "k8s.io/api/") {
			continue
		}
		// Objects with metadata are resources; this drops the option
		// types (ListOptions, PodLogOptions, ...) and WatchEvent.
		if f, ok := t.FieldByName("ObjectMeta"); !ok || f.Type != objectMeta {
			continue
		}
		k := kind{name: gvk.Kind, apiVersion: gvk.GroupVersion().String(), typ: t}
		if prev, dup := byName[k.name]; dup && prev.apiVersion != k.apiVersion {
			return nil, fmt.Errorf("kind %s is in both %s and %s", k.name, prev.apiVersion, k.apiVersion)
		}
		byName[k.name] = k
	}
	kinds := make([]kind, 0, len(byName))
	for _, k := range byName {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i].name < kinds[j].name })
	return kinds, nil
}

// walk records the fixes of t and of every type reachable from it.
func (fx *fixes) walk(t reflect.Type) error {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
			continue
		}
		break
	}
	if fx.seen[t] {
		return nil
	}
	fx.seen[t] = true
	if t.Name() != "" && t.PkgPath() != "" {
		expr, ok, err := openAPIType(t)
		if err != nil {
			return err
		}
		if ok {
			add(fx.types, t.PkgPath(), t.Name(), expr)
			return nil
		}
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			fx.embeds[t.PkgPath()] = appendField(fx.embeds[t.PkgPath()], t.Name(), f.Name)
		}
		if err := fx.walk(f.Type); err != nil {
			return err
		}
	}
	return nil
}

func add(m map[string]map[string]string, pkg, name, v string) {
	if m[pkg] == nil {
		m[pkg] = map[string]string{}
	}
	m[pkg][name] = v
}

func appendField(m map[string][]string, typ, field string) map[string][]string {
	if m == nil {
		m = map[string][]string{}
	}
	m[typ] = append(m[typ], field)
	return m
}

// openAPIType is the CUE type of a Go type that declares its OpenAPI
// schema type (because it has its own JSON encoding); a type whose zero
// value encodes as null may also be null.
func openAPIType(t reflect.Type) (string, bool, error) {
	v := reflect.New(t).Interface()
	st, ok := v.(interface{ OpenAPISchemaType() []string })
	if !ok {
		return "", false, nil
	}
	types := st.OpenAPISchemaType()
	if oneOf, ok := v.(interface{ OpenAPIV3OneOfTypes() []string }); ok && len(oneOf.OpenAPIV3OneOfTypes()) > 0 {
		types = oneOf.OpenAPIV3OneOfTypes()
	}
	var alts []string
	for _, typ := range types {
		switch typ {
		case "string":
			alts = append(alts, "string")
		case "integer":
			alts = append(alts, "int")
		case "number":
			alts = append(alts, "number")
		case "boolean":
			alts = append(alts, "bool")
		case "object":
			alts = append(alts, "{...}")
		case "array":
			alts = append(alts, "[...]")
		default:
			return "", false, fmt.Errorf("%s: unknown OpenAPI type %q", t, typ)
		}
	}
	zero, err := json.Marshal(v)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", t, err)
	}
	if string(zero) == "null" {
		alts = append(alts, "null")
	}
	return strings.Join(alts, " | "), true, nil
}

// rewrite parses one generated file of package pkg and applies the fixes.
func (fx *fixes) rewrite(file, pkg string) (*ast.File, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	f, err := parser.ParseFile(file, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	for _, decl := range f.Decls {
		field, ok := decl.(*ast.Field)
		if !ok {
			continue
		}
		name, _, err := ast.LabelName(field.Label)
		if err != nil || !strings.HasPrefix(name, "#") {
			continue
		}
		name = name[1:]
		if expr, ok := fx.types[pkg][name]; ok {
			if id, ok := field.Value.(*ast.Ident); ok && id.Name == "_" {
				if field.Value, err = parser.ParseExpr(file, expr); err != nil {
					return nil, err
				}
			}
		}
		if st, ok := field.Value.(*ast.StructLit); ok {
			embedFields(st, fx.embeds[pkg][name])
		}
	}
	astutil.Apply(f, func(c astutil.Cursor) bool {
		id, ok := c.Node().(*ast.Ident)
		if !ok || id.Name != "bytes" {
			return true
		}
		if p, ok := c.Parent().Node().(*ast.Field); ok && p.Label == ast.Label(id) {
			return true
		}
		expr, err := parser.ParseExpr(file, base64)
		if err != nil {
			panic(err) // base64 is a valid expression
		}
		c.Replace(&ast.ParenExpr{X: expr})
		return true
	}, nil)
	return f, nil
}

// flatten makes the files one package, k8s: each top-level name N of
// package P becomes alias(P)_N, references to it follow, and imports of
// generated packages go.
func flatten(files []file) error {
	names := map[string]map[string]string{} // package -> old name -> new
	for _, f := range files {
		if names[f.pkg] == nil {
			names[f.pkg] = map[string]string{}
		}
		for _, decl := range f.ast.Decls {
			field, ok := decl.(*ast.Field)
			if !ok {
				continue
			}
			id, ok := field.Label.(*ast.Ident)
			if !ok {
				return fmt.Errorf("%s/%s: unexpected top-level label %T", f.pkg, f.name, field.Label)
			}
			names[f.pkg][id.Name] = rename(f.pkg, id.Name)
		}
	}
	seen := map[string]string{}
	for pkg := range names {
		a := alias(pkg)
		if prev, dup := seen[a]; dup {
			return fmt.Errorf("packages %s and %s have the same alias %s", prev, pkg, a)
		}
		seen[a] = pkg
	}
	for _, f := range files {
		imports := map[string]string{} // name in the file -> import path
		for spec := range f.ast.ImportSpecs() {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			name := path.Base(p)
			if spec.Name != nil {
				name = spec.Name.Name
			}
			imports[name] = p
		}
		local := names[f.pkg]
		var decls []ast.Decl
		for _, decl := range f.ast.Decls {
			switch d := decl.(type) {
			case *ast.Package:
				d.Name = ast.NewIdent("k8s")
			case *ast.ImportDecl:
				continue // all are generated packages, now in this one
			case *ast.Field:
				id := d.Label.(*ast.Ident)
				id.Name = local[id.Name]
			}
			decls = append(decls, decl)
		}
		f.ast.Decls = decls
		var err error
		astutil.Apply(f.ast, func(c astutil.Cursor) bool {
			switch n := c.Node().(type) {
			case *ast.SelectorExpr:
				x, ok := n.X.(*ast.Ident)
				if !ok || imports[x.Name] == "" {
					return true
				}
				pkg := imports[x.Name]
				if names[pkg] == nil {
					err = fmt.Errorf("%s/%s: import of %s, which was not generated", f.pkg, f.name, imports[x.Name])
					return false
				}
				sel, _, e := ast.LabelName(n.Sel)
				if e != nil {
					err = e
					return false
				}
				c.Replace(ast.NewIdent(rename(pkg, sel)))
				return false
			case *ast.Ident:
				if to, ok := local[n.Name]; ok && !isLabel(c) {
					n.Name = to
				}
			}
			return true
		}, nil)
		if err != nil {
			return err
		}
	}
	return nil
}

// isLabel reports whether the cursor's node is the label of a field.
func isLabel(c astutil.Cursor) bool {
	p, ok := c.Parent().Node().(*ast.Field)
	return ok && p.Label == c.Node()
}

// rename is the name of package pkg's top-level name in the flat package:
// #Container of api/core/v1 is #core_v1_Container, _#x is _#core_v1_x.
func rename(pkg, name string) string {
	switch {
	case strings.HasPrefix(name, "_#"):
		return "_#" + alias(pkg) + "_" + name[2:]
	case strings.HasPrefix(name, "#"):
		return "#" + alias(pkg) + "_" + name[1:]
	}
	return alias(pkg) + "_" + name
}

// embedFields turns the fields of st named in names into embeddings.
func embedFields(st *ast.StructLit, names []string) {
	for i, elt := range st.Elts {
		field, ok := elt.(*ast.Field)
		if !ok {
			continue
		}
		label, _, err := ast.LabelName(field.Label)
		if err != nil {
			continue
		}
		for _, n := range names {
			if label == n {
				embed := &ast.EmbedDecl{Expr: field.Value}
				ast.SetComments(embed, ast.Comments(field))
				ast.SetRelPos(embed, token.NewSection)
				if i == 0 {
					ast.SetRelPos(embed, token.Newline)
				}
				st.Elts[i] = embed
			}
		}
	}
}

// index is the index file: #Object and #<Kind> for every kind.
func index(kinds []kind) []byte {
	var b bytes.Buffer
	b.WriteString("// Code generated by hack/gen-k8s-schemas.sh; DO NOT EDIT.\n\n")
	b.WriteString("// Package k8s defines #<Kind> for the core Kubernetes kinds, each pinned\n")
	b.WriteString("// to its apiVersion, and #Object, the shape of every Kubernetes object.\n")
	b.WriteString("// The other files are the Go types of k8s.io/api, translated by cue get go.\n")
	b.WriteString("package k8s\n\n")
	b.WriteString("// #Object is what every object has: apiVersion, kind and a name.\n")
	b.WriteString("#Object: {\n")
	b.WriteString("\tapiVersion: string & !=\"\"\n")
	b.WriteString("\tkind:       string & !=\"\"\n")
	fmt.Fprintf(&b, "\tmetadata: %s & {\n\t\tname: string & !=\"\"\n\t}\n", rename(metaV1, "#ObjectMeta"))
	b.WriteString("\t...\n}\n")
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n#%s: %s & {\n\tapiVersion: %q\n\tkind:       %q\n}\n",
			k.name, rename(k.typ.PkgPath(), "#"+k.typ.Name()), k.apiVersion, k.name)
	}
	out, err := format.Source(b.Bytes())
	if err != nil {
		panic(err) // the template above is valid CUE
	}
	return out
}

// alias names an import: k8s.io/api/apps/v1 is apps_v1.
func alias(importPath string) string {
	return path.Base(path.Dir(importPath)) + "_" + path.Base(importPath)
}
