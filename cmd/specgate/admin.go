package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/specgate/specgate/migrations"
	"github.com/specgate/specgate/tenants"
)

func runTenant(ctx context.Context, args []string) error {
	fs := newFlags("tenant", "[--redis URL] <create|update|list|show|add-key|rotate|remove-key|disable|enable|token> ...")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), tenants.CommandUsage+"\n\n"+tokenUsage) }
	dial := redisFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	// Help needs no Redis.
	if len(rest) == 0 || helpRequested(rest) {
		if len(rest) > 0 && rest[0] == "token" {
			fmt.Println("usage: specgate tenant " + tokenUsage)
			return flag.ErrHelp
		}
		if len(rest) == 0 {
			fs.Usage()
			return errors.New("missing command")
		}
		fmt.Println(tenants.CommandUsage + "\n\n" + tokenUsage)
		return flag.ErrHelp
	}
	rdb, err := dial(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if _, _, err := migrations.Apply(ctx, rdb, "", log.Printf); err != nil {
		return err
	}
	ts := tenants.NewStore(rdb, "", nil)
	if rest[0] == "token" {
		return runTenantToken(ctx, ts, rest[1:], os.Stdout)
	}
	err = tenants.Command(ctx, ts, rest, os.Stdout)
	if errors.Is(err, tenants.ErrUsage) {
		fmt.Fprintln(os.Stderr, tenants.CommandUsage+"\n\n"+tokenUsage)
		// "tenants: usage: X" reads as "specgate tenant: X".
		msg, _ := strings.CutPrefix(err.Error(), tenants.ErrUsage.Error()+": ")
		return errors.New(msg)
	}
	return err
}

const tokenUsage = `token ID --user USER [--ttl 24h] [--url http://127.0.0.1:8080/]
                           sign a user's sign-in token with the tenant's HS256
                           key; print it and the URL that signs a browser in`

func runMigrate(ctx context.Context, args []string) error {
	fs := newFlags("migrate", "[--redis URL]")
	dial := redisFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	rdb, err := dial(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	from, to, err := migrations.Apply(ctx, rdb, "", log.Printf)
	if err != nil {
		return err
	}
	fmt.Printf("schema version %d -> %d (latest %d)\n", from, to, migrations.Latest())
	return nil
}
