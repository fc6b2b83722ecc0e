// Package rootfs is forge's image store: it pulls and imports images through
// containers/image into containers/storage, bootstraps Python images from
// Debian packages, and serves each image to sandboxes as one shared,
// reference-counted, read-only overlay mount.
package rootfs
