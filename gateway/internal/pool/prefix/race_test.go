//go:build race

package prefix

// race is true under -race, which makes the long tests shorter.
const race = true
