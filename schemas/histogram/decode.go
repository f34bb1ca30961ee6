package histogram

import (
	"bytes"
	"encoding/json"
	"errors"
)

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data after the histogram")
	}
	return nil
}
