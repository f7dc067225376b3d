package sops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"gopkg.in/ini.v1"
)

// Each format reads a file into documents (branches) and the sops entry,
// and writes the decrypted documents back, the way sops's own stores do,
// so that the plaintext is what `sops decrypt` prints.

// loadFile parses data as a sops file of format f: its documents without
// the sops entry, and the entry's metadata.
func loadFile(f Format, data []byte) ([]branch, metadata, error) {
	var (
		docs []branch
		meta branch
		err  error
	)
	switch f {
	case YAML:
		docs, err = loadYAML(data)
		if err == nil {
			docs, meta, err = extractNested(docs)
		}
	case Dotenv:
		docs, err = loadDotenv(data)
		if err == nil {
			docs, meta, err = extractFlat(docs)
		}
	case INI:
		docs, err = loadINI(data)
		if err == nil {
			docs, meta, err = extractNested(docs)
		}
		if err == nil {
			for i, it := range meta {
				if s, ok := it.value.(string); ok {
					meta[i].value = strings.ReplaceAll(s, `\n`, "\n")
				}
			}
			meta, err = unflatten(meta)
		}
	default: // JSON and binary
		var b branch
		b, err = loadJSON(data)
		docs = []branch{b}
		if err == nil {
			docs, meta, err = extractNested(docs)
		}
	}
	if err != nil {
		return nil, metadata{}, err
	}
	md, err := metadataFrom(meta)
	return docs, md, err
}

// extractNested removes the "sops" entries of every document and returns
// the first document's, which must be a mapping.
func extractNested(docs []branch) ([]branch, branch, error) {
	var meta branch
	found := false
	for di, d := range docs {
		out := d[:0:0]
		for _, it := range d {
			if k, ok := it.key.(string); ok && k == "sops" {
				if di == 0 {
					if found {
						return nil, nil, errors.New("a duplicate sops entry")
					}
					found = true
					m, ok := it.value.(branch)
					if !ok {
						return nil, nil, errors.New("a sops entry that is not a mapping")
					}
					meta = m
				}
				continue
			}
			out = append(out, it)
		}
		docs[di] = out
	}
	if !found {
		return nil, nil, errNoMetadata
	}
	return docs, meta, nil
}

// extractFlat takes the "sops_" keys of a dotenv file out as metadata.
func extractFlat(docs []branch) ([]branch, branch, error) {
	var meta branch
	if len(docs) > 0 {
		out := docs[0][:0:0]
		for _, it := range docs[0] {
			if k, ok := it.key.(string); ok && strings.HasPrefix(k, "sops_") {
				meta = append(meta, item{key: k[len("sops_"):], value: it.value})
				continue
			}
			out = append(out, it)
		}
		docs[0] = out
	}
	if meta == nil {
		return nil, nil, errNoMetadata
	}
	m, err := unflatten(meta)
	return docs, m, err
}

// emitFile writes decrypted documents in format f.
func emitFile(f Format, docs []branch) ([]byte, error) {
	switch f {
	case YAML:
		return emitYAML(docs)
	case JSON:
		return emitJSON(docs)
	case Dotenv:
		return emitDotenv(docs)
	case INI:
		return emitINI(docs)
	}
	if len(docs) != 1 {
		return nil, errors.New("a binary file is one document")
	}
	for _, it := range docs[0] {
		if it.key == "data" {
			s, ok := it.value.(string)
			if !ok {
				return nil, errors.New("binary data is not a string")
			}
			return []byte(s), nil
		}
	}
	return nil, errors.New("no binary data")
}

// --- YAML: go.yaml.in/yaml/v3 nodes, comments kept as sops keeps them.

func loadYAML(data []byte) ([]branch, error) {
	if len(data) > 0 {
		// Every document must be a mapping; this also bounds aliases.
		if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(make(map[string]any)); err != nil {
			return nil, err
		}
	}
	var docs []branch
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		// sops checks the first document only; a later one could hold an
		// alias bomb or an alias to itself, which the walk below would
		// expand without end. Decoding bounds aliases and refuses both.
		if err := n.Decode(&map[string]any{}); err != nil {
			return nil, err
		}
		b, err := yamlToBranch(&n, branch{}, false)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	return docs, nil
}

// commentLines splits a YAML comment ("#..." lines) into comments,
// without their "#".
func commentLines(c string, inline bool) []comment {
	var out []comment
	if c == "" {
		return nil
	}
	for _, l := range strings.Split(c, "\n") {
		if l != "" {
			out = append(out, comment{value: l[1:], inline: inline})
		}
	}
	return out
}

func addComments(b branch, c string, inline bool) branch {
	for _, cm := range commentLines(c, inline) {
		b = append(b, item{key: cm})
	}
	return b
}

func addListComments(l []any, c string, inline bool) []any {
	for _, cm := range commentLines(c, inline) {
		l = append(l, cm)
	}
	return l
}

func yamlValue(n *yaml.Node, handled bool) (any, error) {
	switch n.Kind {
	case yaml.SequenceNode:
		var l []any
		if !handled {
			l = addListComments(l, n.HeadComment, false)
			l = addListComments(l, n.LineComment, false)
		}
		for _, e := range n.Content {
			l = addListComments(l, e.HeadComment, false)
			l = addListComments(l, e.LineComment, true)
			v, err := yamlValue(e, true)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
			l = addListComments(l, e.FootComment, false)
		}
		if !handled {
			l = addListComments(l, n.FootComment, false)
		}
		return l, nil
	case yaml.MappingNode:
		return yamlToBranch(n, branch{}, handled)
	case yaml.ScalarNode:
		var v any
		_ = n.Decode(&v)
		return v, nil
	case yaml.AliasNode:
		return yamlValue(n.Alias, false)
	}
	return nil, nil
}

func yamlToBranch(n *yaml.Node, b branch, handled bool) (branch, error) {
	if !handled {
		b = addComments(b, n.HeadComment, false)
		b = addComments(b, n.LineComment, false)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			var err error
			if b, err = yamlToBranch(c, b, false); err != nil {
				return nil, err
			}
		}
	case yaml.SequenceNode:
		return nil, errors.New("a YAML document that is a sequence")
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			b = addComments(b, k.HeadComment, false)
			b = addComments(b, k.LineComment, false)
			scalar := v.Kind == yaml.ScalarNode || v.Kind == yaml.AliasNode
			if scalar {
				b = addComments(b, v.HeadComment, false)
				b = addComments(b, v.LineComment, true)
			}
			var key any
			_ = k.Decode(&key)
			val, err := yamlValue(v, scalar)
			if err != nil {
				return nil, err
			}
			b = append(b, item{key: key, value: val})
			if scalar {
				b = addComments(b, v.FootComment, false)
			}
			b = addComments(b, k.FootComment, false)
		}
	case yaml.ScalarNode:
		if n.ShortTag() != "!!null" {
			return nil, errors.New("a YAML document that is a value")
		}
		return b, nil
	case yaml.AliasNode:
		var err error
		if b, err = yamlToBranch(n.Alias, b, false); err != nil {
			return nil, err
		}
	}
	if !handled {
		b = addComments(b, n.FootComment, false)
	}
	return b, nil
}

func joinComments(cs []string) string { return "#" + strings.Join(cs, "\n#") }

func headComments(n *yaml.Node, cs []string) []string {
	if len(cs) > 0 {
		c := joinComments(cs)
		if n.HeadComment != "" {
			c += "\n" + n.HeadComment
		}
		n.HeadComment = c
	}
	return nil
}

func footComments(n *yaml.Node, cs []string) {
	if len(cs) > 0 {
		if n.FootComment != "" {
			n.FootComment += "\n" + joinComments(cs)
		} else {
			n.FootComment = joinComments(cs)
		}
	}
}

func lineComments(n *yaml.Node, cs []string) []string {
	if len(cs) > 0 {
		if n.LineComment != "" {
			n.LineComment += "\n" + joinComments(cs)
		} else {
			n.LineComment = joinComments(cs)
		}
	}
	return nil
}

func yamlNode(v any) *yaml.Node {
	switch v := v.(type) {
	case branch:
		n := &yaml.Node{Kind: yaml.MappingNode}
		yamlMapping(v, n)
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		var head, inline []string
		first := true
		for _, e := range v {
			if c, ok := e.(comment); ok {
				if c.inline {
					inline = append(inline, c.value)
				} else {
					head = append(head, c.value)
				}
				continue
			}
			if first {
				head = headComments(n, head)
				first = false
			}
			en := yamlNode(e)
			head = headComments(en, head)
			inline = lineComments(en, inline)
			n.Content = append(n.Content, en)
		}
		head = append(head, inline...)
		if len(head) > 0 {
			if first {
				headComments(n, head)
			} else {
				footComments(n.Content[len(n.Content)-1], head)
			}
		}
		return n
	}
	if c, ok := v.(comment); ok {
		// A value whose ciphertext said "comment": sops writes the
		// struct it holds it in.
		v = sopsComment{c.value, c.inline}
	}
	n := &yaml.Node{}
	_ = n.Encode(v)
	return n
}

// sopsComment is how sops encodes a comment found where a value was
// expected (a hand-made file): its struct, fields and all.
type sopsComment struct {
	Value  string
	Inline bool
}

func yamlMapping(b branch, n *yaml.Node) {
	var head, inline []string
	first := true
	for _, it := range b {
		if c, ok := it.key.(comment); ok {
			if c.inline {
				inline = append(inline, c.value)
			} else {
				head = append(head, c.value)
			}
			continue
		}
		if first {
			head = headComments(n, head)
			first = false
		}
		k := &yaml.Node{}
		_ = k.Encode(it.key)
		head = headComments(k, head)
		v := yamlNode(it.value)
		inline = lineComments(v, inline)
		n.Content = append(n.Content, k, v)
	}
	head = append(head, inline...)
	if len(head) > 0 {
		if first {
			headComments(n, head)
		} else {
			footComments(n.Content[len(n.Content)-2], head)
		}
	}
}

func emitYAML(docs []branch) ([]byte, error) {
	var buf bytes.Buffer
	e := yaml.NewEncoder(&buf)
	e.SetIndent(4)
	for _, d := range docs {
		m := &yaml.Node{Kind: yaml.MappingNode}
		yamlMapping(d, m)
		if err := e.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{m}}); err != nil {
			return nil, err
		}
	}
	_ = e.Close()
	return buf.Bytes(), nil
}

// --- JSON: a token decoder keeps key order; numbers are ints or floats.

func loadJSON(data []byte) (branch, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, errors.New("a JSON file that is not an object")
	}
	return jsonObject(dec, 0)
}

// maxJSONDepth bounds nesting, so that a hostile file cannot exhaust the
// stack.
const maxJSONDepth = 1000

func jsonNumber(t any) (any, error) {
	n, ok := t.(json.Number)
	if !ok {
		return t, nil
	}
	if i, err := n.Int64(); err == nil {
		return int(i), nil
	}
	return n.Float64()
}

func jsonValue(dec *json.Decoder, t any, depth int) (any, error) {
	if d, ok := t.(json.Delim); ok {
		switch d {
		case '{':
			return jsonObject(dec, depth+1)
		case '[':
			return jsonArray(dec, depth+1)
		}
		return nil, errors.New("unexpected JSON delimiter")
	}
	return jsonNumber(t)
}

func jsonArray(dec *json.Decoder, depth int) ([]any, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("JSON nested too deep")
	}
	var l []any
	for {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if d, ok := t.(json.Delim); ok && d == ']' {
			return l, nil
		}
		v, err := jsonValue(dec, t, depth)
		if err != nil {
			return nil, err
		}
		l = append(l, v)
	}
}

func jsonObject(dec *json.Decoder, depth int) (branch, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("JSON nested too deep")
	}
	var b branch
	for {
		t, err := dec.Token()
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if d, ok := t.(json.Delim); ok && d == '}' {
			return b, nil
		}
		k, ok := t.(string)
		if !ok {
			return nil, errors.New("a JSON key that is not a string")
		}
		t, err = dec.Token()
		if err != nil {
			return nil, err
		}
		var v any
		if d, ok := t.(json.Delim); ok {
			switch d {
			case '[':
				v, err = jsonArray(dec, depth+1)
			case '{':
				v, err = jsonObject(dec, depth+1)
			}
		} else {
			v, err = jsonNumber(t)
		}
		if err != nil {
			return nil, err
		}
		b = append(b, item{key: k, value: v})
	}
}

func jsonEncode(buf *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case branch:
		buf.WriteByte('{')
		first := true
		for _, it := range v {
			if _, ok := it.key.(comment); ok {
				continue
			}
			if !first {
				buf.WriteByte(',')
			}
			first = false
			k, err := json.Marshal(it.key.(string))
			if err != nil {
				return err
			}
			buf.Write(k)
			buf.WriteString(": ")
			if err := jsonEncode(buf, it.value); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
		return nil
	case []any:
		buf.WriteByte('[')
		first := true
		for _, e := range v {
			if _, ok := e.(comment); ok {
				continue
			}
			if !first {
				buf.WriteByte(',')
			}
			first = false
			if err := jsonEncode(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	}
	if c, ok := v.(comment); ok {
		v = sopsComment{c.value, c.inline}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf.Write(b)
	return nil
}

func emitJSON(docs []branch) ([]byte, error) {
	if len(docs) == 0 {
		return nil, errors.New("no document")
	}
	var raw bytes.Buffer
	if err := jsonEncode(&raw, docs[0]); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw.Bytes(), "", ""); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// --- dotenv: KEY=VALUE lines, "#" comments, "\n" escaped in values.

func loadDotenv(data []byte) ([]branch, error) {
	var b branch
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if line[0] == '#' {
			b = append(b, item{key: comment{value: string(line[1:])}})
			continue
		}
		i := bytes.IndexByte(line, '=')
		if i < 0 {
			return nil, errors.New("a dotenv line without =")
		}
		b = append(b, item{key: string(line[:i]), value: strings.ReplaceAll(string(line[i+1:]), `\n`, "\n")})
	}
	return []branch{b}, nil
}

// scalarString is how sops writes a non-string value in dotenv and INI.
func scalarString(v any) string {
	switch v := v.(type) {
	case float64:
		s := strconv.FormatFloat(v, 'G', -1, 64)
		if !strings.ContainsAny(s, ".E") {
			s = strconv.FormatFloat(v, 'f', 1, 64)
		}
		return s
	case bool:
		return strconv.FormatBool(v)
	case time.Time:
		return v.Format(time.RFC3339)
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprintf("%v", v)
}

func emitDotenv(docs []branch) ([]byte, error) {
	if len(docs) == 0 {
		return nil, errors.New("no document")
	}
	var buf bytes.Buffer
	for _, it := range docs[0] {
		switch it.value.(type) {
		case branch, []any:
			return nil, errors.New("a nested value in a dotenv file")
		}
		if c, ok := it.key.(comment); ok {
			buf.WriteString("#" + c.value + "\n")
			continue
		}
		s, ok := it.value.(string)
		if ok {
			s = strings.ReplaceAll(s, "\n", `\n`)
		} else {
			s = scalarString(it.value)
		}
		fmt.Fprintf(&buf, "%v=%s\n", it.key, s)
	}
	return buf.Bytes(), nil
}

// --- INI: gopkg.in/ini.v1, sections as mappings of strings.

func stripComment(c string) string {
	if strings.HasPrefix(c, ";") {
		return strings.TrimLeft(c, "; ")
	}
	if strings.HasPrefix(c, "#") {
		return strings.TrimLeft(c, "# ")
	}
	return c
}

func loadINI(data []byte) ([]branch, error) {
	f, err := ini.LoadSources(ini.LoadOptions{AllowNonUniqueSections: true}, data)
	if err != nil {
		return nil, err
	}
	var b branch
	for _, s := range f.Sections() {
		var items branch
		if s.Comment != "" {
			items = append(items, item{key: comment{value: stripComment(s.Comment)}})
		}
		for _, k := range s.Keys() {
			items = append(items, item{key: k.Name(), value: k.Value()})
			if k.Comment != "" {
				items = append(items, item{key: comment{value: stripComment(k.Comment)}})
			}
		}
		b = append(b, item{key: s.Name(), value: items})
	}
	return []branch{b}, nil
}

func emitINI(docs []branch) ([]byte, error) {
	f := ini.Empty(ini.LoadOptions{AllowNonUniqueSections: true})
	f.DeleteSection(ini.DefaultSection)
	for _, d := range docs {
		for _, it := range d {
			name, ok := it.key.(string)
			if !ok {
				continue
			}
			s, err := f.NewSection(name)
			if err != nil {
				return nil, err
			}
			items, ok := it.value.(branch)
			if !ok {
				return nil, errors.New("an INI section that is not a mapping")
			}
			first := 0
			if len(items) > 0 {
				if c, ok := items[0].key.(comment); ok {
					s.Comment = c.value
					first = 1
				}
			}
			var last *ini.Key
			for _, kv := range items[first:] {
				if c, ok := kv.key.(comment); ok {
					if last != nil {
						last.Comment = c.value
					}
					continue
				}
				k, _ := kv.key.(string)
				if last, err = s.NewKey(k, scalarString(kv.value)); err != nil {
					return nil, err
				}
			}
		}
	}
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
