# The usual tools of the shell image, each used for real (no network needed).
set -eu
cd /tmp
for t in bash coreutils curl jq git zip unzip gawk sed grep; do
  case $t in coreutils) command -v ls >/dev/null ;; *) command -v "$t" >/dev/null ;; esac || { echo "missing $t"; exit 1; }
done
echo "curl: $(curl --version | head -n1 | cut -d' ' -f1-2)"
echo "jq: $(echo '{"a":[1,2,3]}' | jq '.a | add')"
mkdir -p repo && cd repo
git init -q . && echo hi > f.txt && git add f.txt
git -c user.email=t@example.com -c user.name=t commit -qm first
echo "git: $(git log --format=%s)"
zip -q ../a.zip f.txt && mkdir ../x && cd ../x && unzip -q ../a.zip
echo "unzip: $(cat f.txt)"
echo "awk: $(echo 3 4 | gawk '{print $1*$2}')"
