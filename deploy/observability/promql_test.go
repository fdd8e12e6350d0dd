package observability

import (
	"fmt"
	"slices"
	"strings"
)

// The PromQL words that are not metric names where a bare identifier may
// stand: binary operators, modifiers, and the aggregation operators (which
// may be followed by "by (...)" instead of a parenthesis).
var (
	promqlLabelListKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	promqlKeywords          = []string{"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
	promqlAggregations      = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
		"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)

// grafanaIntervals stand in for Grafana's interval variables so that a
// dashboard expression is plain PromQL.
var grafanaIntervals = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// metricNames returns the metric names an expression selects. It is a
// small lexer, not a parser (the parser would pull all of Prometheus into
// go.mod): promtool checks the syntax; this finds every bare identifier that
// is not a keyword, a function or aggregation, or a label in by/on/...
// lists, outside strings, {matchers} and [ranges]. It errs towards
// reporting too much (a false name fails the test loudly) rather than too
// little, and refuses {__name__=...} selectors it would miss.
func metricNames(expr string) ([]string, error) {
	var names []string
	s := expr
	i := 0
	skipSpace := func(j int) int {
		for j < len(s) && strings.ContainsRune(" \t\r\n", rune(s[j])) {
			j++
		}
		return j
	}
	// closing returns the index just past the bracket that closes the one
	// at s[j], stepping over strings.
	closing := func(j int) (int, error) {
		open, shut := s[j], map[byte]byte{'(': ')', '{': '}', '[': ']'}[s[j]]
		depth := 0
		for ; j < len(s); j++ {
			switch c := s[j]; {
			case c == '"' || c == '\'' || c == '`':
				end, err := stringEnd(s, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case c == open:
				depth++
			case c == shut:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %q in %q", open, expr)
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := stringEnd(s, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '{':
			end, err := closing(i)
			if err != nil {
				return nil, err
			}
			if strings.Contains(s[i:end], "__name__") {
				return nil, fmt.Errorf("a __name__ matcher hides its metric from this check: %q", expr)
			}
			i = end
		case c == '[':
			end, err := closing(i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '$':
			return nil, fmt.Errorf("unsubstituted variable outside a string at %q", s[i:])
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdentChar(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			word := s[i:j]
			lower := strings.ToLower(word)
			next := skipSpace(j)
			switch {
			case slices.Contains(promqlLabelListKeywords, lower):
				if next < len(s) && s[next] == '(' {
					end, err := closing(next)
					if err != nil {
						return nil, err
					}
					j = end
				}
			case slices.Contains(promqlKeywords, lower), slices.Contains(promqlAggregations, lower):
			case next < len(s) && s[next] == '(':
				// a function call
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return names, nil
}

// stringEnd returns the index just past the string literal starting at s[i].
func stringEnd(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string in %q", s)
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
