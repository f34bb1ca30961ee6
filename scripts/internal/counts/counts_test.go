package counts

import "testing"

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"empty", Format(map[string]int{}), "-"},
		{"nil", Format[int](nil), "-"},
		{"strings", Format(map[string]int{"b": 2, "a": 1}), "a=1 b=2"},
		{"statuses", Format(map[int]int{500: 1, 200: 40}), "200=40 500=1"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: Format = %q; want %q", tc.name, tc.got, tc.want)
		}
	}
}
