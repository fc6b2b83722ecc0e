package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcp-forge/forge/rootfs"
)

// List is the principal's environments, by name.
func (b *Builder) List(ctx context.Context, principal string) ([]Environment, error) {
	imgs, err := b.opts.Store.Images(ctx)
	if err != nil {
		return nil, err
	}
	var out []Environment
	for _, img := range imgs {
		if img.Labels[LabelOwner] != principal {
			continue
		}
		for _, n := range img.Names {
			if env, ok := fromImage(img, n); ok {
				env.LastUsed = b.lastUsed(n, env.Built)
				out = append(out, env)
			}
		}
	}
	slices.SortFunc(out, func(a, b Environment) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Get is the principal's environment name. Another principal's answers
// like a missing one.
func (b *Builder) Get(ctx context.Context, principal, name string) (*Environment, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	image := ImageName(principal, name)
	img, err := b.opts.Store.Lookup(ctx, image)
	if errors.Is(err, rootfs.ErrImageNotFound) {
		return nil, fmt.Errorf("%w: %q (see `forge env ls`)", ErrNotFound, name)
	}
	if err != nil {
		return nil, err
	}
	env, ok := fromImage(*img, image)
	if !ok || env.Owner != principal {
		return nil, fmt.Errorf("%w: %q (see `forge env ls`)", ErrNotFound, name)
	}
	env.LastUsed = b.lastUsed(image, env.Built)
	return &env, nil
}

// Remove deletes the principal's environment name; one a sandbox uses is
// refused (ErrInUse).
func (b *Builder) Remove(ctx context.Context, principal, name string) error {
	env, err := b.Get(ctx, principal, name)
	if err != nil {
		return err
	}
	if err := b.opts.Store.Remove(ctx, env.Image); err != nil {
		if errors.Is(err, rootfs.ErrImageInUse) {
			return fmt.Errorf("%w: %w; stop the sessions and runs that use it first", ErrInUse, err)
		}
		return err
	}
	os.Remove(b.usedFile(env.Image))
	return nil
}

// Touch records that image was used now (forge gc keeps environments in use).
func (b *Builder) Touch(image string) {
	f := b.usedFile(image)
	now := time.Now()
	if err := os.Chtimes(f, now, now); err != nil {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			b.log.Debug("recording environment use", "image", image, "err", err)
		}
	}
}

func (b *Builder) usedFile(image string) string {
	return filepath.Join(b.dir, "used", strings.NewReplacer("/", "_", ":", "@").Replace(image))
}

func (b *Builder) lastUsed(image string, built time.Time) time.Time {
	if fi, err := os.Stat(b.usedFile(image)); err == nil && fi.ModTime().After(built) {
		return fi.ModTime().UTC()
	}
	return built
}

// GC removes every principal's environments unused for age (0 = the
// configured environment_builder.gc_age; none when that is 0 too). One in
// use is kept. It returns the images removed.
func (b *Builder) GC(ctx context.Context, age time.Duration) ([]string, error) {
	if age == 0 {
		age = time.Duration(b.cfg.GCAge)
	}
	if age <= 0 {
		return nil, nil
	}
	imgs, err := b.opts.Store.Images(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, img := range imgs {
		for _, n := range img.Names {
			env, ok := fromImage(img, n)
			if !ok || time.Since(b.lastUsed(n, env.Built)) < age {
				continue
			}
			err := b.opts.Store.Remove(ctx, n)
			switch {
			case errors.Is(err, rootfs.ErrImageInUse):
			case err != nil:
				errs = append(errs, err)
			default:
				os.Remove(b.usedFile(n))
				removed = append(removed, n)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// Resolve maps what a request names as its image to an image reference:
// the principal's environment of that name, or an image. An environment
// of another principal, by name or by image, answers like a missing one.
func (b *Builder) Resolve(ctx context.Context, principal, name string) (string, error) {
	if ValidName(name) == nil {
		image := ImageName(principal, name)
		if _, err := b.opts.Store.Lookup(ctx, image); err == nil {
			return image, nil
		}
	}
	img, err := b.opts.Store.Lookup(ctx, name)
	if err != nil {
		return "", err
	}
	if owner, ok := img.Labels[LabelOwner]; ok && owner != principal {
		return "", fmt.Errorf("%w: %q (see `forge image ls`)", rootfs.ErrImageNotFound, clip(name, 200))
	}
	return name, nil
}
