// Package plural counts things in English, "1 target" and "2 targets", for
// every message a person reads: the CLI's, the operator's status and events,
// the demo's. It imports nothing of the project.
package plural

import (
	"fmt"
	"strings"
)

// Count counts n of a noun given in the singular: "1 target", "2 targets",
// "0 findings", "3 policies", "2 matches". Every count a message spells goes
// through it, so that no line says "1 targets".
func Count(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %s", n, Noun(noun))
}

// Noun is the plural of an English noun by the regular rules: a consonant
// and y makes -ies; s, x, z, ch and sh take -es; the rest -s.
func Noun(noun string) string {
	lower := strings.ToLower(noun)
	switch {
	case strings.HasSuffix(lower, "y") && len(lower) > 1 && !strings.ContainsRune("aeiou", rune(lower[len(lower)-2])):
		return noun[:len(noun)-1] + "ies"
	case strings.HasSuffix(lower, "s"), strings.HasSuffix(lower, "x"), strings.HasSuffix(lower, "z"),
		strings.HasSuffix(lower, "ch"), strings.HasSuffix(lower, "sh"):
		return noun + "es"
	}
	return noun + "s"
}
