package events_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

// FuzzDecode feeds arbitrary bytes to Decode and DecodeData: no panic, and
// an accepted envelope marshals back to bytes that decode to the same value.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.event.json")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"specversion":"1.0","id":"` + testID + `","source":"s","type":"graygate.request.completed","time":"2025-01-01T00:00:00Z","datacontenttype":"application/json","data":{"gray":{}}}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := events.Decode(b)
		if err != nil {
			return
		}
		d, err := events.DecodeData(env)
		if err == nil {
			if err := d.Check(); err != nil {
				t.Errorf("DecodeData accepted data that fails Check: %v", err)
			}
		}
		again, err := json.Marshal(env)
		if err != nil {
			t.Fatalf("Marshal(decoded envelope): %v", err)
		}
		env2, err := events.Decode(again)
		if err != nil {
			t.Fatalf("Decode(Marshal(Decode(b))) = %v for %s", err, again)
		}
		var a, b2 any
		if json.Unmarshal(env.Data, &a) != nil || json.Unmarshal(env2.Data, &b2) != nil {
			t.Fatalf("data stopped being JSON: %s", again)
		}
		env.Data, env2.Data = nil, nil
		if !reflect.DeepEqual(env, env2) || !reflect.DeepEqual(a, b2) {
			t.Errorf("round trip changed the envelope: %+v vs %+v", env, env2)
		}
	})
}

// FuzzDecodeEvent checks that the fast path agrees with Decode and
// DecodeData on every input: the same acceptance, the same envelope and
// the same data.
func FuzzDecodeEvent(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.event.json")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"type":"graygate.rollout.changed","Type":"x","data":{}}`))
	// Statistics take decodeStats' fast path: compact, and with the
	// numbers and shapes it hands to the slow path.
	if b, err := os.ReadFile("testdata/stats.interval.event.json"); err == nil {
		var buf bytes.Buffer
		if json.Compact(&buf, b) == nil {
			c := buf.Bytes()
			f.Add(c)
			for _, r := range [][2]string{{`"counts":[`, `"counts":[1e0,`}, {`"zero":0`, `"zero":-0`}, {`"requests":42`, `"requests":42.0`},
				{`"gamma":1.02`, `"gamma":1.020`}, {`"stream":true`, `"stream":null`}, {`"arm":"gray"`, `"arm":"gr\u0061y"`},
				{`"offset":243`, `"offset":243,"offset":9`}, {`"counts":[`, `"counts":[12345678901234567890,`},
				{`"truncated":1`, `"truncated":1,"truncated":1`}, {`"schema_violation_both":1,`, ``}, {`"truncated":1`, `"truncated":1,"late":0`},
				{`"arm_fingerprint":"3f1c0a9be2d47781",`, ``}, {`"late_headers":2,`, ``}, {`"late_headers":2`, `"late_headers":99`},
				{`"arm_fingerprint":"3f1c0a9be2d47781"`, `"arm_fingerprint":"3F1C0A9BE2D47781"`},
				{`"band":"long_context","cached":true,`, ``}, {`"band":"long_context"`, `"band":""`}, {`"band":"long_context"`, `"band":"long.context"`},
				{`"band":"long_context"`, `"band":"long\u005fcontext"`}, {`"cached":true`, `"cached":null`}, {`"cached":true`, `"cached":1`},
				{`"cached":true`, `"cached":true,"cached":false`}, {`"endpoint":"chat","band"`, `"endpoint":"chat","cached":false,"band"`}} {
				f.Add(bytes.Replace(c, []byte(r[0]), []byte(r[1]), 1))
			}
		}
	}
	f.Add([]byte(`{"data":{},"data":{"deployment":"a"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, d, err := events.DecodeEvent(b)
		wantEnv, wantErr := events.Decode(b)
		var want events.Data
		if wantErr == nil {
			want, wantErr = events.DecodeData(wantEnv)
		}
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("DecodeEvent error %v; Decode+DecodeData error %v", err, wantErr)
		}
		if err != nil {
			if err.Error() != wantErr.Error() {
				t.Errorf("DecodeEvent error %q; want %q", err, wantErr)
			}
			return
		}
		if !bytes.Equal(env.Data, wantEnv.Data) {
			t.Errorf("Data %q; want %q", env.Data, wantEnv.Data)
		}
		env.Data, wantEnv.Data = nil, nil
		if !reflect.DeepEqual(env, wantEnv) || !reflect.DeepEqual(d, want) {
			t.Errorf("DecodeEvent = %+v %+v; want %+v %+v", env, d, wantEnv, want)
		}
	})
}
