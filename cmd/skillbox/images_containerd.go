package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/policy"
	rtcontainerd "github.com/skillbox/skillbox/runtime/containerd"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
)

// containerdFlags say which containerd `images import|pull` talk to: the
// config's runtime "containerd" block, or the flags over it.
func containerdFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Usage: "HCL config `FILE` whose runtime \"containerd\" block names the daemon (default: built-in defaults)"},
		&cli.StringFlag{Name: "containerd-address", Usage: "containerd's socket `SOCK` (default: the config's, /run/containerd/containerd.sock)"},
		&cli.StringFlag{Name: "namespace", Usage: "containerd namespace (default: the config's, skillbox)"},
	}
}

// containerdBackend makes the containerd backend the flags name.
func containerdBackend(c *cli.Context) (*rtcontainerd.Containerd, error) {
	if !c.Bool("containerd") {
		return nil, exitCode(2, "usage: say where to: --containerd (the only target so far)")
	}
	cfg := policy.Default()
	if f := c.String("config"); f != "" {
		var err error
		if cfg, err = policy.Load(f); err != nil {
			return nil, exitCode(1, "%v", err)
		}
	}
	return stack.OpenContainerd(cfg, stack.RuntimeOptions{
		ContainerdAddress: c.String("containerd-address"), ContainerdNamespace: c.String("namespace"), Logger: imagesLogger(),
	})
}

func imagesImport(c *cli.Context) error {
	cd, err := containerdBackend(c)
	if err != nil {
		return err
	}
	defer cd.Close(c.Context)
	store, _, err := openImages(c, imagesLogger())
	if err != nil {
		return err
	}
	names := c.Args().Slice()
	if len(names) == 0 {
		imgs, err := store.List()
		if err != nil {
			return exitCode(1, "%v", err)
		}
		for _, img := range imgs {
			names = append(names, img.Name)
		}
		if len(names) == 0 {
			return exitCode(1, "no built images in %s: build them first with skillbox images build", store.Dir())
		}
	}
	for _, name := range names {
		img, err := store.Get(name)
		if err != nil {
			return exitCode(1, "%v (build it with skillbox images build %s)", err, name)
		}
		ref, err := cd.ImportImage(c.Context, store.LayoutDir(), img.Name, img.Digest)
		if err != nil {
			return exitCode(1, "%v", err)
		}
		fmt.Fprintf(c.App.Writer, "%s\t%s\t%s (namespace %s)\n", img.Name, img.Digest, ref, cd.Namespace())
	}
	return nil
}

func imagesPull(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, "usage: skillbox images pull --containerd REF")
	}
	cd, err := containerdBackend(c)
	if err != nil {
		return err
	}
	defer cd.Close(c.Context)
	name, err := cd.PullImage(c.Context, c.Args().First())
	if err != nil {
		return exitCode(1, "%v", err)
	}
	fmt.Fprintf(c.App.Writer, "%s (namespace %s)\n", name, cd.Namespace())
	return nil
}

// builtImporter returns what imports each built image into containerd
// when the config given with --config runs the daemon on the containerd
// backend (daemon { runtime = "containerd" }), so that the backend finds
// it there; with other configs, or none, it returns nil (images stay in the
// store only). The config is read and containerd dialled once per command;
// close releases the connection.
func builtImporter(c *cli.Context, store *images.Store) (importOne func(context.Context, *images.Image) error, close func(), err error) {
	f := c.String("config")
	if f == "" {
		return nil, func() {}, nil
	}
	cfg, err := policy.Load(f)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Daemon.Runtime != rtcontainerd.Name {
		return nil, func() {}, nil
	}
	cd, err := stack.OpenContainerd(cfg, stack.RuntimeOptions{Logger: imagesLogger()})
	if err != nil {
		return nil, nil, fmt.Errorf("import into containerd: %w", err)
	}
	importOne = func(ctx context.Context, img *images.Image) error {
		ref, err := cd.ImportImage(ctx, store.LayoutDir(), img.Name, img.Digest)
		if err != nil {
			return fmt.Errorf("import %s into containerd: %w (retry with skillbox images import --containerd --config %s %s)", img.Name, err, f, img.Name)
		}
		fmt.Fprintf(c.App.Writer, "%s\t%s\t%s (containerd namespace %s)\n", img.Name, img.Digest, ref, cd.Namespace())
		return nil
	}
	return importOne, func() { _ = cd.Close(context.WithoutCancel(c.Context)) }, nil
}
