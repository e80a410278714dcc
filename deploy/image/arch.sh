# The names of the image's architectures, sourced by the scripts beside
# it: Debian's (amd64, arm64), Rust's target triple, and the GNU triple
# Debian's cross tools are named by (gcc-aarch64-linux-gnu, ...).
rust_triple() {
    case $1 in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) return 64 ;;
    esac
}
gnu_triple() {
    case $1 in
    amd64) echo x86_64-linux-gnu ;;
    arm64) echo aarch64-linux-gnu ;;
    *) return 64 ;;
    esac
}
