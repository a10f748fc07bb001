package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/specgate/specgate/migrations"
	"github.com/specgate/specgate/tenants"
)

func runTenant(ctx context.Context, args []string) error {
	fs := newFlags("tenant", "[--redis URL] <create|list|show|add-key|rotate|remove-key|disable|enable> ...")
	dial := redisFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	rdb, err := dial(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if _, _, err := migrations.Apply(ctx, rdb, "", log.Printf); err != nil {
		return err
	}
	err = tenants.Command(ctx, tenants.NewStore(rdb, "", nil), fs.Args(), os.Stdout)
	if errors.Is(err, tenants.ErrUsage) {
		fmt.Fprintln(os.Stderr, tenants.CommandUsage)
	}
	return err
}

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
