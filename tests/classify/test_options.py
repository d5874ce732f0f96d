"""Options of "read-only" programs: what runs, writes or connects is found with its value, and
informational, dry-run and read-only invocations of known tools are reads."""

from __future__ import annotations

import pytest

from tests.classify.helpers import rules_of, run
from workflow.classify.taxonomy import RiskClass, Severity


def low_read(command: str) -> bool:
    result = run(command)
    return result.risk_class is RiskClass.READ and result.severity is Severity.LOW


EXECUTES = [
    "rg --pre ./extract.sh TODO",
    "rg --pre=pdftotext --pre-glob '*.pdf' invoice docs/",
    "rg -e foo -g '*.rs' --pre ./p.sh",
    "rg --hostname-bin ./h.sh x",
    "fd -x rm",
    "fd . --exec-batch ./run.sh",
    "fdfind -e py -x python3",
    "bat --pager './p.sh' README.md",
    "ag --pager ./p.sh TODO",
    "ack --pager=./p.sh TODO",
    "less -k ./keys README.md",
    "less '+!id' README.md",
    "man -P ./pager.sh git",
    "man --html=firefox bash",
    "man -C ./man.conf ls",
    "sort --compress-program=./zip.sh -o sorted.txt big.txt",
    "sort --compress-prog=./zip.sh big.txt",
    "sed '1e uname -a' README.md",
    "sed 's/^/echo /e' list.txt",
    "sed -n -e p -e '1e id' README.md",
    "sed -f fix.sed input.txt",
    "awk 'BEGIN { system(\"id\") }'",
    "awk -v a=b 'BEGIN{system(\"id\")}'",
    "awk -F: -v OFS=, '{print | \"sh\"}' cmds.txt",
    "gawk -F , -e 'BEGIN{system(\"id\")}'",
    "awk 'BEGIN { \"id\" | getline u; print u }'",
    "awk -f transform.awk data.txt",
    "gawk -l ./ext.so 'BEGIN{}'",
    "gawk -i ./lib.awk '{print}' f",
    "awk '@load \"filefuncs\"; BEGIN{}'",
    "git grep --open-files-in-pager=./run.sh TODO",
    "git grep -O./run.sh TODO",
    "git -c core.pager=./p.sh log",
    "tar -xf bundle.tar --to-command=./ingest.sh",
    "tar -I ./mycompress -tf data.tar.x",
    "tar -cf /dev/null src --checkpoint=1 --checkpoint-action=exec='sh ./x.sh'",
    "tar --rsh-command=./rsh.sh -tf host:backup.tar",
    "tar -F ./next.sh -tf vol1.tar",
    "tar --use-compress=./x -tf a.tar",
    "jq -f prog.jq data.json",
    "hash -p /tmp/x/cat cat",
    "yq -n 'load(\"/home/agent/.ssh/id_rsa\")'",
    "LESSOPEN='|./pre.sh %s' less README.md",
    "MANPAGER='sh -c id' man ls",
    "TAR_OPTIONS='-I ./x.sh' tar -tf a.tar",
    "RIPGREP_CONFIG_PATH=./rg.conf rg TODO",
    "KUBECONFIG=./kc kubectl get pods",
    "make -n --eval='x := $(shell touch /tmp/made)'",
    "make -n --ev='x := $(shell id)'",
    "make -n SHELL=./x.sh",
    "make -nf other.mk",
    "rsync -n -av -e ./tunnel.sh src/ backup:/srv/",
    "rsync -n -av src/ backup.example.net:/srv/",
    "kubectl --kubeconfig=./kc get pods",
    "kubectl get pods --server=https://k.example.net",
    "helm template ./chart --post-renderer ./p.sh",
    "ip netns exec blue sh",
    "ip -batch cmds.txt",
    "pip install --dry-run requests",
    "strace -p 1234",
]


@pytest.mark.parametrize("command", EXECUTES)
def test_an_option_that_runs_a_program_is_at_least_exec(command: str) -> None:
    result = run(command)
    assert result.risk_class in (RiskClass.EXEC, RiskClass.DESTRUCTIVE), rules_of(result)
    assert result.severity in (Severity.HIGH, Severity.CRITICAL)


WRITES = [
    ("sort -o out.csv in.csv", "medium"),
    ("sort -k 2 -t , -o out.csv in.csv", "medium"),
    ("sort --output=out.csv in.csv", "medium"),
    ("sort --out out.csv in.csv", "medium"),
    ("sort -u words.txt -o words.txt", "medium"),
    ("sort -o ~/.profile names.txt", "critical"),
    ("sort -t: -k3n -o /etc/passwd /etc/passwd", "critical"),
    ("tree -o tree.txt src", "medium"),
    ("tree -o ~/.bashrc src", "critical"),
    ("iconv -f latin1 -t utf-8 -o out.txt in.txt", "medium"),
    ("shuf -o out.txt in.txt", "medium"),
    ("ps aux | less -o procs.txt", "medium"),
    ("less --log-file=log.txt README.md", "medium"),
    ("find . -name '*.log' -fprint /tmp/logs.txt", "medium"),
    ("find src -type f -fprintf manifest.txt '%p %s\\n'", "medium"),
    ("find . -fls ~/.bashrc", "critical"),
    ("uniq input.txt output.txt", "medium"),
    ("xxd firmware.bin firmware.hex", "medium"),
    ("xxd -r -p key.hex ~/.ssh/authorized_keys", "critical"),
    ("sed -n '/TODO/w todo.txt' src/main.c", "medium"),
    ("sed 's/foo/bar/w changed.txt' input.txt", "medium"),
    ("sed -e 1d -e 'w /home/agent/.bashrc' notes.txt", "critical"),
    ("sed -i 's/a/b/' config.yaml", "medium"),
    ("sed -i.bak '/^$/d' ~/.bashrc", "critical"),
    ("sed --in-place -e 's/a/b/' config.yaml", "medium"),
    ("sed -ie 's/a/b/' config.yaml", "medium"),
    ("awk '{ print $0 > \"/tmp/copy.txt\" }' notes.txt", "medium"),
    ('awk \'{ print >> (ENVIRON["HOME"] "/.bashrc") }\' snippet.txt', "critical"),
    ("awk '{ print > $1 }' f", "high"),
    ("gawk -i inplace '{ gsub(/a/, \"b\") } 1' links.txt", "medium"),
    ("gawk -d '{print}' f", "medium"),
    ("strace -o trace.txt ls", "medium"),
    ("file -C -m magic", "medium"),
    ("journalctl --cursor-file=c.txt -n 5", "medium"),
    ("ss -D dump.bin", "medium"),
    ("tar --exclude=x -c -f ~/.bash_profile src", "critical"),
    ("tar -xzf release.tar.gz -C ~/.local/bin", "high"),
    ("tar xzf release.tar.gz", "medium"),
    ("unzip bundle.zip", "medium"),
    ("gunzip data.csv.gz", "medium"),
    ("git log -1 --output=/tmp/last.txt", "medium"),
    ("yq -i '.a = 1' f.yaml", "medium"),
]


@pytest.mark.parametrize(("command", "severity"), WRITES)
def test_an_option_that_writes_is_at_least_a_write_through_the_path_rules(
    command: str, severity: str
) -> None:
    result = run(command)
    assert result.risk_class.rung >= RiskClass.WRITE_LOCAL.rung, rules_of(result)
    assert result.severity.rank >= Severity(severity).rank, rules_of(result)


@pytest.mark.parametrize(
    "command",
    [
        "awk -v x=1 '{print}' /home/agent/.ssh/id_rsa",
        "grep -e TODO -f /home/agent/.ssh/id_rsa src",
        "grep -e x ~/.aws/credentials",
        "grep -A 3 -e password /home/agent/.netrc",
        "grep --regexp=key --file=patterns.txt .env",
        "rg --type-add 'x:*' -tx -e BEGIN ~/.ssh",
        "head -n 5 -- /home/agent/.aws/credentials",
        "tail -n +1 -q ~/.git-credentials",
        "jq -r --arg k v '.auths' /home/agent/.docker/config.json",
        "jq --rawfile k ~/.ssh/id_rsa -n '$k'",
        "sort --files0-from=/home/agent/.netrc",
        "wc --files0-from=/home/agent/.netrc",
        "sed 'r /home/agent/.ssh/id_rsa' notes.txt",
        "awk 'BEGIN { while ((getline l < \"/home/agent/.netrc\") > 0) print l }'",
        "tar czf /tmp/k.tgz ~/.ssh",
        "cat $(echo ~/.ssh/id_rsa)",
        "tree --fromfile ~/.ssh/id_rsa",
        "git blame --contents=/home/agent/.ssh/id_rsa README.md",
        "man -l ~/.ssh/id_rsa",
        "docker compose --env-file ~/.aws/credentials config",
        "helm template ./chart -f ~/.ssh/id_rsa",
        "kubectl apply --dry-run=client -f /home/agent/.ssh/id_rsa",
    ],
)
def test_an_option_value_is_never_taken_for_the_program_or_the_file(command: str) -> None:
    result = run(command)
    assert "secret_access" in result.categories, rules_of(result)
    assert result.severity is Severity.CRITICAL


@pytest.mark.parametrize(
    "command",
    [
        "jq -n env",
        "jq -n '$ENV'",
        "jq --arg k v -n 'env'",
        "awk 'BEGIN{for (k in ENVIRON) print k \"=\" ENVIRON[k]}'",
        "ps eww",
        "ps aeux",
        "yq 'env(AWS_SECRET_ACCESS_KEY)' f.yaml",
        "yq -n '$ENV'",
    ],
)
def test_a_reader_that_prints_the_environment_is_secret_access(command: str) -> None:
    assert "secret_access" in run(command).categories


READS = [
    "grep -- -delete notes.txt",
    "grep -e --pre notes.txt",
    "rg -e --pre notes.txt",
    "rg -- --pre notes.txt",
    "echo --force",
    "echo -delete",
    "echo ~/.ssh/id_rsa",
    "find . -name '-delete'",
    "find . -name '-exec' -type f",
    "awk 'length > 120' src/app.py",
    "awk -F, 'NR>1 {s+=$3} END {print s}' sales.csv",
    "awk '/system\\(/ {print FILENAME \": \" $0}' scripts/x.awk",
    "awk '{ if ($1 > 3) print $2 }' f",
    "awk 'BEGIN { print (1 > 2) }'",
    "sed -n '/e id/p' notes.txt",
    "sed 's/a/b/g; y/abc/xyz/' f",
    "sed -n '1,/^$/p' f",
    "sed '/x/{s/a/b/;p}' f",
    "sed --sandbox 's/a/b/w out' f",
    "xxd -l 64 image.png",
    "ls -d */",
    "ls -la ~/.ssh",
    "jq -r '.items[] | .name' data.json",
    "jq --arg k v '.[$k]' data.json",
    "yq '.spec.replicas' deploy.yaml",
    "yq eval '.a' f.yaml",
    "git reflog -n 10",
    "git clean -nd",
    "git add -n .",
    "git rm -n -r build/",
    "git remote show -n origin",
    "git log -n 5 --format=%H",
    "tar -tf release.tar.gz",
    "tar -tvzf backup.tgz",
    "tar tvf backup.tar",
    "unzip -l bundle.zip",
    "gunzip -c data.csv.gz",
    "xz -dc dump.xz",
    "zstd -dc a.zst",
    "less +G README.md",
    "date -d tomorrow +%F",
    "date +%s",
    "hostname -f",
    "printf -v name '%s' x",
]


@pytest.mark.parametrize("command", READS)
def test_text_that_only_looks_dangerous_is_data(command: str) -> None:
    assert low_read(command), rules_of(run(command))


INFORMATIONAL = [
    "curl --help",
    "curl -V",
    "rm --help",
    "git push --help",
    "docker run --help",
    "docker compose up --help",
    "kubectl delete --help",
    "kubectl version --client",
    "terraform apply -help",
    "terraform version",
    "pip install --help",
    "sudo -h",
    "bash --version",
    "xargs --help",
    "parallel --version",
    "mkfs.ext4 -V",
    "shred --help",
    "openssl version",
    "helm version",
    "git help log",
]


@pytest.mark.parametrize("command", INFORMATIONAL)
def test_help_and_version_of_a_known_command_are_reads(command: str) -> None:
    assert low_read(command), rules_of(run(command))


@pytest.mark.parametrize(
    "command",
    [
        "shutdown -h",
        "sh -v",
        "sudo ./x.sh --help",
        "sudo somebin --help",
        "docker run alpine --help",
        "python3 script.py --help",
        "npm run build --help",
        "kubectl exec pod --help",
        "./tool --version",
        "pytest --help",
        "pytest --version",
    ],
)
def test_a_help_flag_is_informational_only_where_the_program_reads_it_so(command: str) -> None:
    assert not low_read(command), rules_of(run(command))


DRY_RUNS = [
    "make -n",
    "make -n install",
    "make --dry-run -C sub all",
    "rsync -n -av src/ /tmp/backup/",
    "rsync --dry-run -a --delete build/ dist/",
    "terraform plan",
    "terraform plan -var-file=dev.tfvars",
    "kubectl apply --dry-run=client -f deploy.yaml",
    "kubectl delete pod api-0 --dry-run=server",
    "apt-get -s install nginx",
    "apt-get --simulate upgrade",
    "parallel --dry-run gzip ::: logs/*.log",
    "helm template ./chart",
]


@pytest.mark.parametrize("command", DRY_RUNS)
def test_a_dry_run_is_a_read(command: str) -> None:
    assert low_read(command), rules_of(run(command))


@pytest.mark.parametrize(
    "command",
    [
        "kubectl apply --dry-run=none -f deploy.yaml",
        "terraform plan -out=tf.plan",
        "apt-get -s -o Dpkg::Pre-Invoke::=./x install nginx",
        "apt-get install nginx",
        "helm template bitnami/nginx",
        "make",
    ],
)
def test_a_dry_run_keeps_what_acts_even_in_a_dry_run(command: str) -> None:
    assert not low_read(command), rules_of(run(command))


OPS_READS = [
    "kubectl get pods -n kube-system -o wide",
    "kubectl -n prod get deploy,svc",
    "kubectl describe secret db-creds",
    "kubectl get secrets",
    "kubectl logs deploy/api --tail=100",
    "kubectl config view",
    "kubectl auth can-i create deployments",
    "helm list -A",
    "helm get values api",
    "docker ps -a --format '{{.Names}}'",
    "docker compose ps",
    "docker inspect --format '{{.State.Status}}' web",
    "podman image inspect docker.io/library/alpine:3.19",
    "systemctl status nginx",
    "journalctl -u nginx -n 100 --no-pager",
    "journalctl -b -1 -p err",
    "ss -tlnp",
    "ip -br link",
    "ip route get 1.1.1.1",
    "hostnamectl",
    "timedatectl status",
    "npm ls --depth=0",
    "npm run",
    "npm config get registry",
    "pip show requests",
    "python3 -m pip list",
    "apt list --installed",
    "apt-cache policy nginx",
    "dpkg -L coreutils",
    "dpkg-query -W",
    "go env GOPATH",
    "kill -l",
    "crontab -l",
    "sysctl -a",
    "sysctl -n kernel.hostname",
    "mount",
    "dmesg --level=err",
    "top -b -n 1",
    "terraform validate",
    "terraform fmt -check",
    "terraform state list",
    "rpm -qa",
    "rpm -qi bash",
    "getent passwd agent",
    "launchctl list",
    "brew services list",
    "aws s3 help",
    "git commit --dry-run",
    "kubectl get pods -owide",
    "tree ~/.ssh",
    "man -l ./docs/tool.1",
]


@pytest.mark.parametrize("command", OPS_READS)
def test_a_read_only_subcommand_of_an_ops_tool_is_a_read(command: str) -> None:
    assert low_read(command), rules_of(run(command))


@pytest.mark.parametrize(
    "command",
    [
        "kubectl get secret db -o jsonpath='{.data.password}'",
        "kubectl get secret/db -o yaml",
        "kubectl config view --raw",
        "kubectl exec -it api-0 -- sh",
        "kubectl port-forward svc/api 8080:80",
        "docker -H tcp://10.0.0.5:2375 ps",
        "docker run alpine",
        "podman --remote ps",
        "systemctl stop nginx",
        "journalctl --vacuum-time=2d",
        "journalctl -n --vacuum-size=1M",
        "dmesg -C",
        "ss -K dst 10.0.0.5",
        "ip link set eth0 down",
        "hostnamectl set-hostname x",
        "npm run build",
        "npm config get //registry.npmjs.org/:_authToken",
        "npm version patch",
        "pip list --log pip.log",
        "go env -w GOFLAGS=-x",
        "kill -9 1",
        "crontab -r",
        "sysctl -w vm.swappiness=10",
        "sysctl vm.swappiness=10",
        "mount /dev/sdb1 /mnt",
        "dpkg -i x.deb",
        "hostname build-42",
        "date -s '2020-01-01 00:00'",
        "terraform fmt",
        "terraform state rm aws_instance.x",
        "rpm -i x.rpm",
        "rpm -qa --dbpath /tmp/db",
        "getent shadow",
        "kubectl get secrets -oyaml",
        "systemctl -H root@db.example.net status nginx",
        "pip config list",
        "bat cache --build",
        "launchctl unload x.plist",
        "brew services start x",
    ],
)
def test_a_changing_subcommand_of_an_ops_tool_is_held(command: str) -> None:
    assert not low_read(command), rules_of(run(command))


@pytest.mark.parametrize(
    "command",
    [
        "npm view react version",
        "npm view lodash version --registry=https://npm.example.net/",
        "npm outdated",
        "pip index versions numpy",
        "pip list --outdated",
        "git remote show origin",
        "git remote show https://git.example.net/x.git",
        "pip download requests -d /tmp/wheels",
        "go mod download",
    ],
)
def test_a_read_only_subcommand_that_asks_the_network_is_egress(command: str) -> None:
    result = run(command)
    assert result.risk_class is not RiskClass.READ
    assert "network" in result.categories, rules_of(result)


SQL_READS = [
    "psql -c 'SELECT count(*) FROM users'",
    "psql -d app -c 'SELECT id, status FROM jobs ORDER BY id DESC LIMIT 20'",
    "psql -c '\\dt'",
    "psql -c '\\d users'",
    "psql -At -c 'SELECT version()'",
    "psql -c 'EXPLAIN SELECT * FROM orders WHERE id = 1'",
    "psql -c \"SELECT 'DROP TABLE x; \\\\! id' AS s\"",
    "sqlite3 app.db 'SELECT * FROM jobs LIMIT 5'",
    "sqlite3 app.db '.tables'",
    "sqlite3 -readonly app.db '.schema users'",
    "sqlite3 -header -csv app.db 'select * from users limit 3'",
    "mysql -e 'SELECT id FROM t WHERE x IN (1, 2)'",
    "mysql -e 'SHOW TABLES'",
]


@pytest.mark.parametrize("command", SQL_READS)
def test_a_read_only_query_through_a_database_client_is_a_read(command: str) -> None:
    assert low_read(command), rules_of(run(command))


@pytest.mark.parametrize(
    "command",
    [
        "psql -c 'SELECT 1; DROP TABLE users'",
        "psql -c 'EXPLAIN ANALYZE DELETE FROM t'",
        "psql -c 'WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d'",
        "psql -c \"SELECT nextval('s')\"",
        "psql -c \"SELECT pg_read_file('/etc/passwd')\"",
        "psql -c 'SELECT * INTO backup FROM t'",
        "psql -c 'SELECT 1 \\g /tmp/out'",
        "psql -c '\\! id'",
        "psql -c \"COPY (SELECT 1) TO PROGRAM 'id'\"",
        "psql -o out.txt -c 'SELECT * FROM users'",
        "psql -Lsession.log -c 'SELECT 1'",
        "psql -f q.sql",
        "psql",
        "sqlite3 app.db '.shell id'",
        "sqlite3 app.db \"SELECT readfile('/home/agent/.ssh/id_rsa')\"",
        "sqlite3 app.db \"select writefile('out.bin', body) from blobs\"",
        "sqlite3 app.db '.output dump.sql' '.dump'",
        "sqlite3 -cmd '.shell id' app.db 'SELECT 1'",
        "sqlite3 app.db",
        "mysql -e \"SELECT * FROM t INTO OUTFILE '/tmp/x'\"",
        "mysql -e 'SELECT LOAD_FILE(\"/etc/passwd\")'",
        "mysql -e 'system id'",
    ],
)
def test_a_query_that_writes_runs_or_reads_files_keeps_its_class(command: str) -> None:
    assert not low_read(command), rules_of(run(command))


def test_a_read_query_against_another_host_is_egress() -> None:
    result = run("psql -h db.prod.example.com -c 'SELECT 1'")
    assert result.risk_class is RiskClass.EGRESS
    assert "network" in result.categories
    assert low_read("psql -h localhost -c 'SELECT 1'")
