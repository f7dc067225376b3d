package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// budget is what is left of the unpacked limits while a chart and the
// archives under its charts/ are read.
type budget struct {
	files int
	bytes int64
	depth int // archives still allowed below this one
}

// unpack reads a chart archive (a gzipped tar of one directory holding
// Chart.yaml) into files rooted at that directory, refusing what Helm's
// own reader lets through: links, devices and other special files, and
// entries outside the directory. The archives under charts/ are checked
// the same way, against the same budget.
func unpack(tgz []byte, b *budget) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("not a gzipped archive: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	top := ""
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
		switch hd.Typeflag {
		case tar.TypeXHeader, tar.TypeXGlobalHeader, tar.TypeDir:
			continue
		case tar.TypeReg:
		case tar.TypeSymlink, tar.TypeLink:
			return nil, fmt.Errorf("archive entry %q: a link, refused", hd.Name)
		default:
			return nil, fmt.Errorf("archive entry %q: not a regular file (type %q), refused", hd.Name, hd.Typeflag)
		}
		dir, rel, err := entryPath(hd.Name)
		if err != nil {
			return nil, err
		}
		if top == "" {
			top = dir
		} else if dir != top {
			return nil, fmt.Errorf("archive entry %q: outside the chart directory %s/", hd.Name, top)
		}
		if _, dup := files[rel]; dup {
			return nil, fmt.Errorf("archive entry %q: given twice", hd.Name)
		}
		b.files--
		if b.files < 0 {
			return nil, fmt.Errorf("%w: more files than the limit", ErrLimit)
		}
		if hd.Size > b.bytes {
			return nil, fmt.Errorf("%w: unpacked chart larger than the limit (%s is %d bytes)", ErrLimit, rel, hd.Size)
		}
		data, err := io.ReadAll(io.LimitReader(tr, b.bytes+1))
		if err != nil {
			return nil, fmt.Errorf("archive entry %q: %w", hd.Name, err)
		}
		if int64(len(data)) > b.bytes {
			return nil, fmt.Errorf("%w: unpacked chart larger than the limit", ErrLimit)
		}
		b.bytes -= int64(len(data))
		files[rel] = data
		if isSubchartArchive(rel) {
			if err := checkSubchart(rel, data, b); err != nil {
				return nil, err
			}
		}
	}
	if len(files) == 0 {
		return nil, errors.New("archive: no files")
	}
	return files, nil
}

// entryPath splits an archive entry's name into the chart directory and
// the file's path inside it, refusing any that would leave it.
func entryPath(name string) (dir, rel string, err error) {
	if strings.ContainsRune(name, '\\') || strings.HasPrefix(name, "/") {
		return "", "", fmt.Errorf("archive entry %q: an absolute or Windows path, refused", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", "", fmt.Errorf("archive entry %q: leaves the chart directory, refused", name)
		}
	}
	dir, rel, ok := strings.Cut(path.Clean(name), "/")
	if !ok || dir == "." || rel == "" {
		return "", "", fmt.Errorf("archive entry %q: not inside the chart directory, refused", name)
	}
	return dir, rel, nil
}

// isSubchartArchive tells a chart archive vendored under charts/ (at any
// depth of unpacked subcharts).
func isSubchartArchive(rel string) bool {
	dir, file := path.Split(rel)
	return strings.HasSuffix(file, ".tgz") && (dir == "charts/" || strings.HasSuffix(dir, "/charts/"))
}

// checkSubchart reads a vendored archive against the budget, one level
// deeper, so that nested archives cannot unpack past the limits when the
// renderer loads them.
func checkSubchart(rel string, data []byte, b *budget) error {
	if b.depth <= 0 {
		return fmt.Errorf("%w: %s: charts nested deeper than the limit", ErrLimit, rel)
	}
	b.depth--
	defer func() { b.depth++ }()
	if _, err := unpack(data, b); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// load checks that files are a chart as Helm's loader reads it, and
// returns it.
func load(files map[string][]byte) (*chart.Chart, error) {
	bufs := make([]*archive.BufferedFile, 0, len(files))
	for name, data := range files {
		bufs = append(bufs, &archive.BufferedFile{Name: name, Data: data})
	}
	c, err := loader.LoadFiles(bufs)
	if err != nil {
		return nil, fmt.Errorf("not a valid chart: %w", err)
	}
	return c, nil
}
