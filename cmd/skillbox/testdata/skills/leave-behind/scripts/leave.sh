set -e
echo real > real.txt
ln -s /etc/passwd passwd-link
ln -s /etc etc-link
mkfifo pipe
mkdir -p outputs/d
ln -s ../../real.txt outputs/d/rel-link
echo done
