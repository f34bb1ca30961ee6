package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// maxReplicas bounds --replicas (a pool holds at most 1,024 replicas).
const maxReplicas = 1024

// replicaOverrides collects the --replica flags: each sets one flag's value
// for one replica, "I:NAME=VALUE", where I counts from 0 and NAME is a
// behaviour option (status, hang, content, …), an engine option
// (prefill-tokens-per-s, decode-step, …), or "down" (no value, or a
// boolean). Later flags win over earlier ones for the same replica and name.
type replicaOverrides []string

func (r *replicaOverrides) String() string {
	if r == nil {
		return ""
	}
	return strings.Join(*r, " ")
}

func (r *replicaOverrides) Set(v string) error {
	if _, _, _, err := splitOverride(v); err != nil {
		return err
	}
	*r = append(*r, v)
	return nil
}

// splitOverride reads "I:NAME=VALUE" (or "I:NAME" for a boolean).
func splitOverride(v string) (index int, name, value string, err error) {
	idx, rest, ok := strings.Cut(v, ":")
	if !ok {
		return 0, "", "", fmt.Errorf("want I:NAME=VALUE, got %q", v)
	}
	index, err = strconv.Atoi(strings.TrimSpace(idx))
	if err != nil || index < 0 {
		return 0, "", "", fmt.Errorf("want I:NAME=VALUE with I a replica index from 0, got %q", v)
	}
	name, value, hasValue := strings.Cut(rest, "=")
	name = strings.TrimSpace(name)
	if !hasValue {
		value = "true"
	}
	return index, name, value, nil
}

// replicaSpec is one replica's behaviour defaults and engine.
type replicaSpec struct {
	settings Settings
	engine   EngineConfig
	// down replicas bind their port, print their line, then close it:
	// connections are refused, as by a stopped pod.
	down bool
}

// replicaSpecs applies the --replica overrides to a copy of the process
// flags per replica, reporting every bad override.
func (c *cli) replicaSpecs() ([]replicaSpec, error) {
	specs := make([]replicaSpec, c.replicas)
	for i := range specs {
		specs[i] = replicaSpec{settings: c.settings, engine: c.engineCfg}
	}
	var errs []error
	for _, v := range c.overrides {
		i, name, value, err := splitOverride(v)
		if err == nil && i >= c.replicas {
			err = fmt.Errorf("replica %d does not exist: --replicas is %d", i, c.replicas)
		}
		if err == nil {
			err = specs[i].set(name, value)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--replica %s: %w", v, err))
		}
	}
	for i := range specs {
		if err := specs[i].engine.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("replica %d: %w", i, err))
		}
	}
	return specs, errors.Join(errs...)
}

// set applies one override.
func (r *replicaSpec) set(name, value string) error {
	if name == "down" {
		b, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return fmt.Errorf("down: want true or false, got %q", value)
		}
		r.down = b
		return nil
	}
	if o := engineOptionByName(name); o != nil {
		return o.set(&r.engine, value)
	}
	if o, ok := optionsByName[name]; ok {
		return o.set(&r.settings, value)
	}
	return fmt.Errorf("unknown flag %q", name)
}

// replicaAddrs returns each replica's listen address: consecutive ports
// from --listen-base (or --listen), or port 0 for each when the base port
// is 0. A bare port means host 127.0.0.1.
func (c *cli) replicaAddrs() ([]string, error) {
	base := c.listenBase
	if base == "" {
		base = c.listen
	}
	if _, err := strconv.Atoi(base); err == nil {
		base = net.JoinHostPort("127.0.0.1", base)
	}
	host, portText, err := net.SplitHostPort(base)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", base, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port+c.replicas-1 > 65535 {
		return nil, fmt.Errorf("listen address %q: want a port in [0, %d] for %d replicas", base, 65536-c.replicas, c.replicas)
	}
	addrs := make([]string, c.replicas)
	for i := range addrs {
		p := port
		if port != 0 {
			p += i
		}
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(p))
	}
	return addrs, nil
}
