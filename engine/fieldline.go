package engine

import (
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FieldLine returns the line of a field path in a YAML document whose root
// node is root: the line of the field's key, or of the list item for an
// index. Paths are those of Kubernetes field errors:
// "spec.targets[1].params", or "metadata.labels[app.kubernetes.io/name]"
// where brackets hold a key with dots or slashes (a key holding "]" is
// quoted: `data["a]b"]`). When the field is absent it is the line of its
// nearest ancestor that is present. Aliases are followed.
func FieldLine(root *yaml.Node, field string) int {
	if root == nil {
		return 0
	}
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	n, line := root, root.Line
	for _, part := range SplitFieldPath(field) {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		var next *yaml.Node
		switch n.Kind {
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(part); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		case yaml.MappingNode:
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == part {
					next = n.Content[j+1]
					line = n.Content[j].Line
					break
				}
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return line
}

// SplitFieldPath splits "spec.targets[1].labels[a.b/c]" into spec, targets,
// 1, labels, a.b/c: dots separate fields, brackets hold an index or a key,
// which may be quoted as a Go string.
func SplitFieldPath(field string) []string {
	var parts []string
	for field != "" {
		switch field[0] {
		case '.':
			field = field[1:]
		case '[':
			if len(field) > 1 && field[1] == '"' {
				if q, err := strconv.QuotedPrefix(field[1:]); err == nil && strings.HasPrefix(field[1+len(q):], "]") {
					s, _ := strconv.Unquote(q)
					parts = append(parts, s)
					field = field[1+len(q)+1:]
					continue
				}
			}
			end := strings.IndexByte(field, ']')
			if end < 0 {
				return append(parts, field[1:])
			}
			parts = append(parts, field[1:end])
			field = field[end+1:]
		default:
			end := strings.IndexAny(field, ".[")
			if end < 0 {
				end = len(field)
			}
			parts = append(parts, field[:end])
			field = field[end:]
		}
	}
	return parts
}

// MapValue returns the value of key in a mapping node, or nil.
func MapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
