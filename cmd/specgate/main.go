// Command specgate is the multi-tenant LLM chat service and its tools.
//
//	specgate serve      run the service (gateway, web UI and engine)
//	specgate tenant     manage tenants and their signing keys
//	specgate migrate    apply pending Redis data migrations
//	specgate generate   print a model's continuation of a prompt
//	specgate bench      measure prefill and decode speed against the memory floor
//	specgate mkmodel    write a random-weight llama GGUF of any shape
//	specgate loadgen    drive a running gateway with many tenants' chats
//	specgate status     list the live gateways and engines with their load
//
// Run `specgate <command> -h` for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
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
	"mkmodel":  {"write a random-weight llama GGUF of any shape", runMkmodel},
	"status":   {"list the live gateways and engines with their load", runStatus},
	"loadgen": {"drive a running gateway with many tenants' multi-turn chats; print TTFT/ITL/tokens/s per tenant", func(ctx context.Context, a []string) error {
		return loadgen.Main(ctx, a, os.Stdout)
	}},
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: specgate <command> [flags]\n\ncommands:\n")
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		if os.Args[1] != "-h" && os.Args[1] != "--help" && os.Args[1] != "help" {
			fmt.Fprintf(os.Stderr, "specgate: unknown command %q\n\n", os.Args[1])
		}
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.run(ctx, os.Args[2:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "specgate %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
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
