package text

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheck(t *testing.T) {
	refused := []struct {
		name string
		s    string
		r    rune
		at   int
	}{
		{"NUL", "schema\x00drift", 0, 6},
		{"tab", "a\tb", '\t', 1},
		{"line feed", "first\nsecond", '\n', 5},
		{"carriage return", "x\r", '\r', 1},
		{"escape", "\x1b[31mred", 0x1b, 0},
		{"DEL", "a\x7f", 0x7f, 1},
		{"C1 next line", "a\u0085b", 0x85, 1},
		{"C1 CSI", "\u009b31m", 0x9b, 0},
		{"right-to-left override", "promote \u202egnp.exe", 0x202e, 8},
		{"left-to-right embedding", "\u202a", 0x202a, 0},
		{"pop directional formatting", "a\u202c", 0x202c, 1},
		{"right-to-left isolate", "\u2067x", 0x2067, 0},
		{"pop directional isolate", "x\u2069", 0x2069, 1},
		{"left-to-right mark", "a\u200eb", 0x200e, 1},
		{"right-to-left mark", "a\u200fb", 0x200f, 1},
		{"Arabic letter mark", "\u061c", 0x61c, 0},
		{"line separator", "a\u2028b", 0x2028, 1},
		{"paragraph separator", "a\u2029b", 0x2029, 1},
		{"not UTF-8", "ok \xff", utf8.RuneError, 3},
		{"a cut sequence", "ok \xe2\x80", utf8.RuneError, 3},
	}
	for _, c := range refused {
		err := Check("reason", c.s)
		var e *Error
		if !errors.As(err, &e) || e.Field != "reason" || e.Rune != c.r || e.Offset != c.at {
			t.Errorf("%s: Check(%q) = %v; want an Error for reason at byte %d, U+%04X", c.name, c.s, err, c.at, c.r)
			continue
		}
		if !strings.HasPrefix(err.Error(), "reason holds ") {
			t.Errorf("%s: message %q does not name the field first", c.name, err)
		}
	}
	allowed := []string{
		"", "rolled back: TTFT p99 above 3s", "回滚：延迟过高", "تراجع بسبب الأخطاء", "עברית", "emoji 🚦 ok",
		"zero width joiner 👩\u200d💻", "a real replacement character \ufffd", "backslash \\u202e written out",
		"non-breaking\u00a0space", "punctuation ‘quoted’ — dash…",
	}
	for _, s := range allowed {
		if err := Check("reason", s); err != nil {
			t.Errorf("Check(%q) = %v; want nil", s, err)
		}
	}
}

func TestEscape(t *testing.T) {
	cases := []struct{ in, one, lines string }{
		{"plain", "plain", "plain"},
		{"promote \u202egnp.exe", `promote \u202egnp.exe`, `promote \u202egnp.exe`},
		{"a\x00b", `a\x00b`, `a\x00b`},
		{"\x1b[2J", `\x1b[2J`, `\x1b[2J`},
		{"two\nlines\tand tab", `two\x0alines\x09and tab`, "two\nlines\tand tab"},
		{"cr\r", `cr\x0d`, `cr\x0d`},
		{"c1 \u0085", `c1 \u0085`, `c1 \u0085`},
		{"bad \xff\xfe", `bad \xff\xfe`, `bad \xff\xfe`},
		{"isolate \u2066x\u2069", `isolate \u2066x\u2069`, `isolate \u2066x\u2069`},
		{"real \ufffd kept", "real \ufffd kept", "real \ufffd kept"},
		{"日本語 ok", "日本語 ok", "日本語 ok"},
	}
	for _, c := range cases {
		if got := Escape(c.in); got != c.one {
			t.Errorf("Escape(%q) = %q; want %q", c.in, got, c.one)
		}
		if got := EscapeLines(c.in); got != c.lines {
			t.Errorf("EscapeLines(%q) = %q; want %q", c.in, got, c.lines)
		}
	}
}

// FuzzEscape: whatever bytes are stored, Escape shows them as text Check
// accepts (so nothing is interpreted), EscapeLines as such text split by
// line feeds and tabs, and text Check accepts is shown unchanged.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "plain", "a\x00b", "\u202e", "\xff", "x\n\ty", "\u2028", "\xe2\x80\xae", "\xe2\x80", "\ufffd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		one := Escape(s)
		if err := Check("shown", one); err != nil {
			t.Fatalf("Escape(%q) = %q, which Check refuses: %v", s, one, err)
		}
		lines := EscapeLines(s)
		for _, part := range strings.FieldsFunc(lines, func(r rune) bool { return r == '\n' || r == '\t' }) {
			if err := Check("shown", part); err != nil {
				t.Fatalf("EscapeLines(%q) = %q, which holds %v", s, lines, err)
			}
		}
		if (Check("s", s) == nil) != (one == s) {
			t.Fatalf("Check(%q) = %v but Escape changed it to %q (or left it)", s, Check("s", s), one)
		}
	})
}

func TestCell(t *testing.T) {
	for _, tc := range []struct {
		s     string
		width int
		want  string
	}{
		{"", 10, ""},
		{"rolled back", 11, "rolled back"},
		{"rolled back", 10, "rolled ba…"},
		{"ünïcödé", 5, "ünïc…"},      // runes, not bytes
		{"a\u202eb", 20, `a\u202eb`}, // escaped first …
		{"a\u202eb", 4, `a\u…`},      // … then cut
		{`a\u202eb`, 20, `a\u202eb`}, // escaped text comes out the same
		{"no limit", 0, "no limit"},
	} {
		if got := Cell(tc.s, tc.width); got != tc.want {
			t.Errorf("Cell(%q, %d) = %q, want %q", tc.s, tc.width, got, tc.want)
		}
	}
	if OrDash("") != "-" || OrDash("alice") != "alice" {
		t.Errorf("OrDash: %q %q", OrDash(""), OrDash("alice"))
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 12400: "12,400", -1024: "-1,024", 1234567: "1,234,567", -100: "-100"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
