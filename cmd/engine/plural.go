package main

import (
	"fmt"
	"strings"
)

// plural counts n of a noun given in the singular, in English: "1 target",
// "2 targets", "0 findings", "3 policies", "2 matches". Every count the CLI
// prints goes through it, so that no line says "1 targets".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %s", n, pluralNoun(noun))
}

// pluralNoun is the plural of an English noun by the regular rules: a
// consonant and y makes -ies; s, x, z, ch and sh take -es; the rest -s.
func pluralNoun(noun string) string {
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
