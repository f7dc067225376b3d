package engine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/lang/cue"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// inlineCUEFile is the file an inline CUE transform is compiled from.
const inlineCUEFile = "transform.cue"

// loadCUETransform compiles spec.transform.cue: a package in a source
// directory, or inline text. Its digest covers the expression and every
// .cue file of its source, which the package may import.
func (e *evaluation) loadCUETransform(ref *v1alpha1.CUEProgramRef) error {
	expr := ref.Expression
	if expr == "" {
		expr = "objects"
	}
	var (
		name, dir string
		files     map[string][]byte
	)
	if ref.Inline != "" {
		name, dir = "<inline>", "."
		files = map[string][]byte{inlineCUEFile: []byte(ref.Inline)}
	} else {
		snap := e.snaps[ref.Source]
		name = strings.TrimSuffix(snap.FileName(ref.Source, ""), "/")
		files, dir = snap.Files, ref.Path
	}
	tr, err := cue.LoadTransform(name, files, dir, expr)
	if err != nil {
		return fmt.Errorf("spec.transform.cue: %w", err)
	}
	cueFiles := map[string][]byte{}
	for p, b := range files {
		if path.Ext(p) == ".cue" {
			cueFiles[p] = b
		}
	}
	if e.cueDigest, err = digestTyped(struct{ Dir, Expression, Content string }{dir, expr, ContentDigest(cueFiles)}); err != nil {
		return err
	}
	e.cueTransform = tr
	return nil
}

// runCUETransform evaluates the CUE transform for one target within the
// limits of Starlark transforms: the timeout and the number of objects.
func (e *evaluation) runCUETransform(ctx context.Context, t target, objects []Input) ([]map[string]any, error) {
	limits := e.opts.Limits.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, limits.Timeout)
	defer cancel()
	inputs := make([]map[string]any, len(objects))
	for i, in := range objects {
		inputs[i] = in.Object
	}
	labels := make(map[string]any, len(t.spec.Labels))
	for k, v := range t.spec.Labels {
		labels[k] = v
	}
	objs, err := e.cueTransform.Eval(ctx, cue.Input{
		Params: t.params.m,
		Target: map[string]any{
			"name":      t.spec.Name,
			"namespace": t.namespace,
			"cluster":   clusterName(t.spec),
			"labels":    labels,
		},
		Inputs: inputs,
	})
	if errors.Is(err, cue.ErrTimeout) {
		return nil, fmt.Errorf("CUE transform: %w", &lstar.LimitError{Limit: lstar.LimitTimeout, Value: limits.Timeout.String()})
	}
	if err != nil {
		return nil, err
	}
	if len(objs) > limits.MaxObjects {
		return nil, fmt.Errorf("CUE transform: %d objects: %w", len(objs),
			&lstar.LimitError{Limit: lstar.LimitObjects, Value: strconv.Itoa(limits.MaxObjects)})
	}
	return objs, nil
}
