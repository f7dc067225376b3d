// Package doccmd reads the shell commands that the project's Markdown
// documentation (README.md and docs/) tells a reader to run, so that a test
// can run each of them and check that it still does what the page says.
//
// What a command is, kept small on purpose:
//   - Only fenced code blocks whose info string is exactly "sh" hold
//     commands (```sh). Blocks marked console, yaml, text, json or anything
//     else are examples to read, never run; a console block's "$ " lines are
//     a command with its output, shown, not run. Fences are backtick fences
//     (three or more), possibly indented (inside a list item); the fence's
//     indentation is removed from the block's lines.
//   - In a sh block every line that is not blank and not only a comment
//     starts a command. A line ending in a backslash continues onto the next
//     line; the lines are joined with one space in Text.
//   - A comment starts at a # that begins a word (at the start of the line
//     or after a space or tab) outside single and double quotes, as in sh;
//     it is stripped from Text.
//   - The comment on a command's last line may say what the command exits
//     with: "# exit N", optionally followed by an explanation
//     ("# exit 1: examples/policies breaks its pack on purpose"). Without
//     it, the command is said to exit 0.
//   - A command whose text names bin/demo/kubeconfig talks to the cluster
//     that make demo starts (Cluster); hack/demo runs those against it.
//
// Here-documents and multi-line quoted strings are not commands this
// package understands: the documentation does not use them.
package doccmd

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// DemoKubeconfig is the kubeconfig make demo writes; a command naming it is
// a Cluster command.
const DemoKubeconfig = "bin/demo/kubeconfig"

// Command is one shell command of a ```sh block of a Markdown file.
type Command struct {
	File    string // path relative to the repo root, e.g. "README.md", "docs/cli.md"
	Line    int    // 1-based line of the command's first line
	Text    string // the command, continuation lines (trailing \) joined, comments stripped
	Exit    int    // the exit code the doc says it has: a trailing comment `# exit N` on the command, else 0
	Cluster bool   // it talks to the demo's cluster: its text names bin/demo/kubeconfig
}

// String names the command by its place, for test and error messages.
func (c Command) String() string {
	return fmt.Sprintf("%s:%d: %s", c.File, c.Line, c.Text)
}

// FromFile returns the commands of the Markdown file rel (slash-separated,
// relative to root), in the order they appear.
func FromFile(root, rel string) ([]Command, error) {
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("read commands: %w", err)
	}
	return parse(rel, string(b))
}

// FromRepo returns the commands of README.md and then of every Markdown
// file under docs/ (walked in lexical order) of the repository at root.
func FromRepo(root string) ([]Command, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find the documentation: %w", err)
	}
	var all []Command
	for _, f := range files {
		cmds, err := FromFile(root, f)
		if err != nil {
			return nil, err
		}
		all = append(all, cmds...)
	}
	return all, nil
}

// fence matches a backtick fence line: its indentation, its backticks and
// its info string.
var fence = regexp.MustCompile("^([ \t]*)(`{3,})[ \t]*([^`]*)$")

// exitComment matches the comment that gives a command's exit code.
var exitComment = regexp.MustCompile(`^#\s*exit\s+(\d+)\b`)

// parse returns the commands of the ```sh blocks of the Markdown text of
// the file named file.
func parse(file, text string) ([]Command, error) {
	var (
		cmds    []Command
		inBlock bool   // inside a fenced block
		isSh    bool   // that block is a sh block
		ticks   string // the opening fence's backticks
		indent  string // the opening fence's indentation
		open    int    // the opening fence's line
		cur     *Command
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := fence.FindStringSubmatch(line); m != nil {
			if !inBlock {
				inBlock, ticks, indent, open = true, m[2], m[1], n
				isSh = strings.TrimSpace(m[3]) == "sh"
				continue
			}
			if strings.TrimSpace(m[3]) == "" && len(m[2]) >= len(ticks) {
				if cur != nil {
					return nil, fmt.Errorf("%s:%d: command ends in a backslash at the end of its block", file, cur.Line)
				}
				inBlock = false
				continue
			}
		}
		if !inBlock || !isSh {
			continue
		}
		body, comment := splitComment(strings.TrimPrefix(line, indent))
		body = strings.TrimSpace(body)
		cont := strings.HasSuffix(body, `\`)
		if cont {
			body = strings.TrimSpace(strings.TrimSuffix(body, `\`))
		}
		if cur == nil {
			if body == "" {
				continue // a blank or comment-only line
			}
			cur = &Command{File: file, Line: n}
		}
		if body != "" {
			if cur.Text != "" {
				cur.Text += " "
			}
			cur.Text += body
		}
		if cont {
			continue
		}
		if m := exitComment.FindStringSubmatch(comment); m != nil {
			code, err := strconv.Atoi(m[1])
			if err != nil || code > 255 {
				return nil, fmt.Errorf("%s:%d: exit code %q is not between 0 and 255", file, n, m[1])
			}
			cur.Exit = code
		}
		cur.Cluster = strings.Contains(cur.Text, DemoKubeconfig)
		cmds = append(cmds, *cur)
		cur = nil
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if inBlock {
		return nil, fmt.Errorf("%s:%d: code block is never closed", file, open)
	}
	return cmds, nil
}

// splitComment splits a shell line into what comes before its comment and
// the comment (from its #), as sh reads them: a # starts a comment at the
// start of a word, outside quotes.
func splitComment(line string) (body, comment string) {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i], line[i:]
		}
	}
	return line, ""
}
