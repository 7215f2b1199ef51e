// Command load reads a Compose file with the Compose specification's own loader
// (github.com/compose-spec/compose-go/v2) for one set of profiles and compose-level
// variables, and prints what Docker Compose would run as one JSON document on stdout:
//
//	{"project": <the resolved project>, "interpolated": [<variables the file looked up>],
//	 "warnings": [<what the loader warned about, such as an obsolete key>]}
//
// The project is the loader's canonical form: anchors and merge keys resolved, `${VAR}`
// interpolated from the -env variables only (never this process's environment), short
// syntax normalised to long (environment as a map, ports and depends_on as objects), and
// only the services the profiles enable. Any error the loader reports (invalid YAML, a
// schema violation, an interpolation error, an unknown service in depends_on) is printed on
// stderr and the exit status is 1; usage errors exit 2.
//
// Usage:
//
//	go run ./deploy/compose/load [-profile NAME]... [-env NAME=VALUE]... FILE
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/sirupsen/logrus"
)

// warnings keeps what the loader logs at warning level or above, instead of printing it.
type warnings struct{ seen []string }

func (w *warnings) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel}
}

func (w *warnings) Fire(entry *logrus.Entry) error {
	w.seen = append(w.seen, entry.Message)
	return nil
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var profiles, env list
	flag.Var(&profiles, "profile", "a profile to enable (repeatable)")
	flag.Var(&env, "env", "a compose-level variable NAME=VALUE (repeatable)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: load [-profile NAME]... [-env NAME=VALUE]... FILE")
		os.Exit(2)
	}
	for _, kv := range env {
		if !strings.Contains(kv, "=") {
			fmt.Fprintf(os.Stderr, "load: -env %q is not NAME=VALUE\n", kv)
			os.Exit(2)
		}
	}

	warned := &warnings{seen: []string{}}
	logrus.SetOutput(io.Discard)
	logrus.AddHook(warned)

	looked := map[string]bool{}
	record := func(o *loader.Options) {
		if o.Interpolate == nil { // reading the files, before the loader interpolates
			return
		}
		lookup := o.Interpolate.LookupValue
		o.Interpolate.LookupValue = func(key string) (string, bool) {
			looked[key] = true
			return lookup(key)
		}
	}
	options, err := cli.NewProjectOptions(
		[]string{flag.Arg(0)},
		cli.WithEnv(env),
		cli.WithProfiles(profiles),
		cli.WithLoadOptions(record),
	)
	fail(err)
	project, err := options.LoadProject(context.Background())
	fail(err)
	body, err := project.MarshalJSON()
	fail(err)

	interpolated := make([]string, 0, len(looked))
	for key := range looked {
		interpolated = append(interpolated, key)
	}
	sort.Strings(interpolated)
	out, err := json.Marshal(map[string]any{"project": json.RawMessage(body), "interpolated": interpolated, "warnings": warned.seen})
	fail(err)
	os.Stdout.Write(append(out, '\n'))
}

func fail(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "load: %v\n", err)
		os.Exit(1)
	}
}
