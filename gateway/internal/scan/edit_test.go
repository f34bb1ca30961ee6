package scan

import "testing"

func TestApplyReplacingLeavesEditsAsRecorded(t *testing.T) {
	body := []byte(`{"model":"a","top_p":null}`)
	var r Request
	if err := Scan(body, &r); err != nil {
		t.Fatal(err)
	}
	var e Edits
	e.InsertMember(&r, "n", 1)
	e.ReplaceNumber(r.Params[TopP].Value.Start, r.Params[TopP].Value.End, 0.5)
	m := r.Model.Value
	for _, c := range []struct{ model, want string }{
		{`"gray"`, `{"model":"gray","top_p":0.5,"n":1}`},
		{`"primary"`, `{"model":"primary","top_p":0.5,"n":1}`},
	} {
		if got := string(e.ApplyReplacing(nil, body, m.Start, m.End, c.model)); got != c.want {
			t.Errorf("ApplyReplacing(%s) = %s; want %s", c.model, got, c.want)
		}
	}
	if e.Len() != 2 {
		t.Errorf("Len = %d after ApplyReplacing; want 2", e.Len())
	}
}
