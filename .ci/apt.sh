# Sourced by the .ci/install-*.sh scripts that take Debian packages:
# apt_install PKG... installs them quietly, as root or through
# passwordless sudo, and fails with a message naming what could not be
# installed when neither is available.
apt_install() {
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "apt-get not found: cannot install $*" >&2
		return 1
	fi
	local sudo=""
	if [ "$(id -u)" != 0 ]; then
		if ! command -v sudo >/dev/null 2>&1; then
			echo "not root and no sudo: cannot install $*" >&2
			return 1
		fi
		sudo="sudo -n"
	fi
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	# --no-install-recommends: the programs the tests run, not the daemons
	# and extras the packages recommend.
	$sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
