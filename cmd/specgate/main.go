// Command specgate is the multi-tenant LLM chat service and its tools.
//
//	specgate serve      run the service (gateway, web UI and engine)
//	specgate tenant     manage tenants and their signing keys
//	specgate migrate    apply pending Redis data migrations
//	specgate generate   print a model's continuation of a prompt
//	specgate bench      measure prefill and decode speed against the memory floor
//	specgate mkmodel    write a random-weight llama GGUF, or inflate a small one (not trained)
//	specgate loadgen    drive a running gateway with many tenants' chats
//	specgate status     list the live gateways and engines with their load
//	specgate version    print the build's version
//	specgate tokenize   print a text's token ids
//	specgate logits     print a prompt's last-position logits as JSON
//
// Run `specgate <command> -h` for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	_ "github.com/specgate/specgate/engine/model/llama"
	"github.com/specgate/specgate/gateway/loadgen"
	_ "github.com/specgate/specgate/kernels/cpu"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{
	"serve":    {"run the service: WebSocket gateway, web UI and engine", runServe},
	"tenant":   {"manage tenants and their signing keys", runTenant},
	"migrate":  {"apply pending Redis data migrations", runMigrate},
	"generate": {"print a model's continuation of a prompt", runGenerate},
	"bench":    {"measure prefill and decode tokens/s against the memory-bandwidth floor", runBench},
	"mkmodel":  {"write a random-weight llama GGUF, or inflate a small one (not trained)", runMkmodel},
	"status":   {"list the live gateways and engines with their load", runStatus},
	"version":  {"print the build's version, commit and Go version", runVersion},
	"tokenize": {"print a text's token ids as a model's tokenizer makes them", runTokenize},
	"logits":   {"print the last position's logits of a prompt decoded in one batch, as JSON", runLogits},
	"loadgen": {"drive a running gateway with many tenants' multi-turn chats; print TTFT/ITL/tokens/s per tenant", func(ctx context.Context, a []string) error {
		return loadgen.Main(ctx, a, os.Stdout)
	}},
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: specgate <command> [flags]\n\ncommands:\n")
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	name := os.Args[1]
	cmd, ok := commands[name]
	if !ok {
		// Asking for help is not an error; an unknown command is.
		if name == "-h" || name == "--help" || name == "help" {
			usage(os.Stdout)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "specgate: unknown command %q\n\n", name)
		usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.run(ctx, os.Args[2:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // the flag set has printed the usage
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "specgate %s: %s\n", name, errorText(err))
		os.Exit(1)
	}
}

// packagePrefixes are the "pkg: " prefixes this module's packages put on
// their errors. The command line already says "specgate <command>: ", so
// the first one is dropped rather than printed twice.
var packagePrefixes = []string{
	"tenants: ", "gateway: ", "migrations: ", "cluster: ", "engine: ", "model: ",
	"gguf: ", "llama: ", "download: ", "kernels: ", "loadgen: ", "tokenizer: ",
}

// errorText is err's message without a leading package prefix.
func errorText(err error) string {
	msg := err.Error()
	for _, p := range packagePrefixes {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return rest
		}
	}
	return msg
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("specgate "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: specgate %s %s\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}
