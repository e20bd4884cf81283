"""Job scripts as users bring them to `picluster submit SCRIPT`, without Slurm: their #SBATCH lines
checked, their SGE #$ lines translated into sbatch's options (each said), the folder the job runs
in chosen where its nodes see it, mail asked for, and what Slurm here cannot honour said or
refused.  (tests/test_slurm_lab.py queues such scripts on a real Slurm; test_class_vm.py the
whole class's day on VMs.)"""

import subprocess

import pytest
from slurm_fixtures import INVENTORY, inventory

from picluster.jobs.slurm import batch, script
from picluster.jobs.slurm.origin import Origin
from picluster.util.errors import UsageError

from conftest import picluster

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ4vXGk5mm2cKR3AzVg1ZzJ8RyPUm8mCzTWc2qR6Z4a5 alice@laptop"
USERS = f'\n[users]\nalice = "{KEY}"\n'  # work folders on the share: /mnt/picluster/users/<name>

# Typed by alice on the controller (sbatch runs there, as her), in a folder of the share...
ON_SHARE = Origin("/mnt/picluster/users/alice/thesis", here=True, on_node=True, account="alice", home="/home/alice")
# ...in a folder of the controller's own disk, which no other node has...
ON_CONTROLLER = Origin("/home/alice/thesis", here=True, on_node=True, account="alice", home="/home/alice")
# ...in her home (every node has one, at the same path);
IN_HOME = Origin("/home/alice", here=True, on_node=True, account="alice", home="/home/alice")
# or by the teacher on a laptop, whose folders no node sees (sbatch runs over SSH, as pi, in pi's home).
ON_LAPTOP = Origin("/home/teacher/course", here=False, on_node=False, account="pi")




def read(text: str, origin: Origin = ON_SHARE, inv=None, name: str = "job.sh"):
    return script.read(inv or inventory(INVENTORY + USERS), name, text.encode(), origin)


# The kind of script a university cluster's user has: SGE's directives, a module of their shell set-up.
SEED = """#!/bin/bash
#$ -cwd
#$ -V
#$ -l h=node02
#$ -N mc-pi
#$ -l mem_free=512M
#$ -o mc-$JOB_ID.out
#$ -j y
#$ -l h_rt=0:10:0
#$ -m be
#$ -M alice@example.org
source ~/.bashrc
picluster run montecarlo --samples 1e7 --nodes 1
"""


def test_the_seeds_script_runs_as_written_each_directive_said():
    job = read(SEED, ON_SHARE)
    assert job.text == SEED  # travels as it is: Slurm reads its #SBATCH lines, the #$ lines stay comments
    assert job.options == ["--chdir=/mnt/picluster/users/alice/thesis", "--nodelist=node02", "--job-name=mc-pi", "--mem=512M",
                           "--output=mc-%j.out", "--time=00:10:00", "--mail-type=BEGIN,END", "--mail-user=alice@example.org"]
    assert job.said == [
        "job.sh:2: #$ -cwd -> --chdir=/mnt/picluster/users/alice/thesis (the folder you submitted from, on the share every node mounts)",
        "job.sh:3: #$ -V -> --export=ALL (sbatch's default: the environment of the session that submits, on the controller)",
        "job.sh:4: #$ -l h=node02 -> --nodelist=node02",
        "job.sh:5: #$ -N mc-pi -> --job-name=mc-pi",
        "job.sh:6: #$ -l mem_free=512M -> --mem=512M",
        "job.sh:7: #$ -o mc-$JOB_ID.out -> --output=mc-%j.out",
        "job.sh:8: #$ -j y -> stdout and stderr in one file (sbatch's default without --error)",
        "job.sh:9: #$ -l h_rt=0:10:0 -> --time=00:10:00",
        "job.sh:10: #$ -m be -> --mail-type=BEGIN,END",
        "job.sh:11: #$ -M alice@example.org -> --mail-user=alice@example.org",
        "job.sh: mail: none will come: the cluster sends no mail ([slurm] has no mail_prog); the job runs all the same: "
        "follow it with 'picluster jobs'",
    ]
    # With a mail program on the controller, the line says the mail will come, and through what.
    mailing = read(SEED, ON_SHARE, inventory(INVENTORY + 'mail_prog = "/usr/bin/mail"\n' + USERS))
    assert mailing.said[-1] == "job.sh: mail: sent through /usr/bin/mail on node01 ([slurm] mail_prog)"
    assert mailing.options == job.options


@pytest.mark.parametrize("origin,inv_text,chdir,why", [
    (ON_SHARE, INVENTORY + USERS, "/mnt/picluster/users/alice/thesis", "the folder you submitted from, on the share every node mounts"),
    (ON_CONTROLLER, INVENTORY + USERS, "/mnt/picluster/users/alice",
     "your work folder on the share: /home/alice/thesis is not on the share the nodes mount"),
    (IN_HOME, INVENTORY + USERS, "/home/alice", "the folder you submitted from, your home, on every node"),
    (ON_LAPTOP, INVENTORY + USERS, "/mnt/picluster/users/pi",
     "your work folder on the share: /home/teacher/course is on this machine only"),
    (ON_CONTROLLER, INVENTORY, "/home/alice", "your home on the job's nodes: /home/alice/thesis is not on the share the nodes mount, "
                                              "and the cluster has no work folders on its share ([users])"),
])
def test_cwd_is_the_submit_folder_where_the_nodes_see_it_else_the_persons_work_folder(origin, inv_text, chdir, why):
    """-cwd never names a folder only the submitting machine has: the job would fail before it
    starts (its output file cannot be opened there) or run in the node's /tmp."""
    job = read("#!/bin/bash\n#$ -cwd\n#$ -o out.txt\nhostname\n", origin, inventory(inv_text))
    assert job.options == [f"--chdir={chdir}", "--output=out.txt"]  # the output relative to it, as Slurm reads it
    assert job.said[0] == f"job.sh:2: #$ -cwd -> --chdir={chdir} ({why})"


def test_cwd_over_ssh_without_work_folders_is_the_home_sbatch_starts_in():
    job = read("#!/bin/bash\n#$ -cwd\nhostname\n", ON_LAPTOP, inventory())
    assert job.options == []  # over SSH, sbatch starts in pi's home, which every node has
    assert job.said == ["job.sh:2: #$ -cwd -> your home on the job's nodes (your home on the job's nodes: /home/teacher/course "
                        "is on this machine only, and the cluster has no work folders on its share ([users]))"]


def test_a_script_naming_no_folder_runs_where_sge_or_sbatch_would_when_the_nodes_have_it():
    # SGE runs a job without -cwd in the home: so here too, wherever it was typed.
    sge = read("#!/bin/bash\n#$ -N x\nhostname\n", ON_SHARE)
    assert sge.options == ["--job-name=x", "--chdir=/home/alice"]
    assert sge.said[-1] == ("job.sh: runs in /home/alice (no -cwd: your home, as SGE runs a job (#$ -cwd runs it in the folder "
                            "you submit from))")
    assert read("#!/bin/bash\n#$ -N x\nhostname\n", IN_HOME).options == ["--job-name=x"]  # sbatch starts there already
    assert read("#!/bin/bash\n#$ -N x\nhostname\n", ON_LAPTOP).options == ["--job-name=x"]  # over SSH: in the home
    # sbatch's scripts run in the folder they were submitted from, when the nodes have it...
    assert read("#!/bin/bash\n#SBATCH --time=5\nhostname\n", ON_SHARE).options == []
    # ...and in the person's work folder when only the controller has it.
    slurm = read("#!/bin/bash\n#SBATCH --time=5\nhostname\n", ON_CONTROLLER)
    assert slurm.options == ["--chdir=/mnt/picluster/users/alice"]
    assert slurm.said == ["job.sh: runs in /mnt/picluster/users/alice (your work folder on the share: /home/alice/thesis is not "
                          "on the share the nodes mount)"]
    # A folder the script names is its own.
    assert read("#!/bin/bash\n#SBATCH --chdir=/tmp\nhostname\n", ON_CONTROLLER).options == []
    assert read("#!/bin/bash\n#$ -wd /srv/data\nhostname\n", ON_CONTROLLER).options == ["--chdir=/srv/data"]


def test_a_command_typed_in_a_folder_only_the_controller_has_runs_in_the_work_folder():
    inv = inventory(INVENTORY + USERS)
    req = batch.check(inv, ("hostname",), batch.Asked(), origin=ON_CONTROLLER)
    assert req.chdir == "/mnt/picluster/users/alice"
    assert req.said == ("the job runs in /mnt/picluster/users/alice (your work folder on the share: /home/alice/thesis is not on "
                        "the share the nodes mount)",)
    assert "\n#SBATCH --chdir=/mnt/picluster/users/alice\n" in batch.script(inv, req)
    for origin in (ON_SHARE, IN_HOME, ON_LAPTOP):  # where sbatch starts it, the nodes have that folder
        req = batch.check(inv, ("hostname",), batch.Asked(), origin=origin)
        assert req.chdir is None and req.said == () and "--chdir" not in batch.script(inv, req)


UNHONOURED = [
    ("#$ -A thesis", [], "#$ -A thesis -> nothing: every job is accounted to Slurm's one account here"),
    ("#$ -P deep", [], "#$ -P deep -> nothing: Slurm here has no projects"),
    ("#$ -l arch=lx-amd64", [], "#$ -l arch=lx-amd64 -> nothing: arch=lx-amd64: Slurm places jobs by node, not by architecture; "
                                "the nearest: -l h=NODE"),
    ("#$ -l h_cpu=3600", [], "#$ -l h_cpu=3600 -> nothing: h_cpu=3600: Slurm limits a job's wall-clock time, not its CPU time; "
                             "the nearest: -l h_rt"),
    ("#$ -l h_rt=600,h_stack=8M", ["--time=00:10:00"], "#$ -l h_rt=600,h_stack=8M -> --time=00:10:00 (h_stack=8M: a per-process "
                                                       "limit Slurm does not set; the nearest: 'ulimit -s' in the script)"),
    ("#$ -l h_data=2G", ["--mem-per-cpu=2048M"], "#$ -l h_data=2G -> --mem-per-cpu=2048M"),
    ("#$ -l exclusive=true", ["--exclusive"], "#$ -l exclusive=true -> --exclusive"),
    ("#$ -soft -l h=node03", [], "#$ -l h=node03 -> nothing: a soft request (after -soft), which Slurm has not"),
    ("#$ -hard -l h=node03", ["--nodelist=node03"], "#$ -hard -> nothing: every Slurm request is a hard one"),
    ("#$ -q all.q", ["--partition=lab"], "#$ -q all.q -> --partition=lab (the cluster's one queue; all.q is not one of its)"),
    ("#$ -q lab@node02", ["--partition=lab", "--nodelist=node02"], "#$ -q lab@node02 -> --partition=lab --nodelist=node02"),
    ("#$ -p -100", ["--nice=100"], "#$ -p -100 -> --nice=100 (lower than other jobs of the same fair share)"),
    ("#$ -p 10", [], "#$ -p 10 -> nothing: only an operator raises a job's priority in Slurm"),
    ("#$ -m bes", ["--mail-type=BEGIN,END"], "#$ -m bes -> --mail-type=BEGIN,END (s: Slurm mails no suspension"),
    ("#$ -m a", ["--mail-type=FAIL,REQUEUE"], "#$ -m a -> --mail-type=FAIL,REQUEUE"),
    ("#$ -m s", [], "#$ -m s -> nothing: s: Slurm mails no suspension"),
    ("#$ -notify", ["--signal=B:USR2@60"], "#$ -notify -> --signal=B:USR2@60 (SGE warns a job with SIGUSR2"),
    ("#$ -a 202712242330.15", ["--begin=2027-12-24T23:30:15"], "#$ -a 202712242330.15 -> --begin=2027-12-24T23:30:15"),
    ("#$ -t 1-10 -tc 2", ["--array=1-10%2"], "#$ -tc 2 -> --array=...%2 (at most 2 of its tasks at once)"),
    ("#$ -hold_jid_ad 41", ["--dependency=aftercorr:41"], "#$ -hold_jid_ad 41 -> --dependency=aftercorr:41"),
    ("#$ -i in.txt", ["--input=in.txt"], "#$ -i in.txt -> --input=in.txt"),
    ("#$ -binding linear:2", [], "#$ -binding linear:2 -> nothing: Slurm holds a job to its cores where jobs are confined"),
    ("#$ -b n", [], "#$ -b n -> nothing: a script, as sbatch takes it"),
    ("#$ -R y", [], "#$ -R y -> nothing: Slurm's backfill plans a start for every pending job"),
    ("#$ -now y", [], "#$ -now y -> nothing: Slurm queues the job"),
    ("#$ -terse", [], "#$ -terse -> nothing: submit prints the job's id alone on its standard output"),
]


@pytest.mark.parametrize("line,options,said", UNHONOURED)
def test_a_directive_slurm_cannot_honour_as_written_is_said_with_its_nearest_equivalent(line, options, said):
    job = read(f"#!/bin/bash\n#$ -cwd\n{line}\nhostname\n", ON_SHARE)
    assert job.options == ["--chdir=/mnt/picluster/users/alice/thesis", *options]  # and the job is queued
    assert any(s.startswith(f"job.sh:3: {said}") for s in job.said), job.said


def test_sges_shell_is_the_interpreter_and_source_under_sh_is_said():
    # -S names the shell SGE runs the script with: it becomes the #! line, in place of another.
    job = read("#!/bin/sh\n#$ -S /bin/bash\n#$ -cwd\nsource ~/.bashrc\nhostname\n")
    assert job.text == "#!/bin/bash\n#$ -S /bin/bash\n#$ -cwd\nsource ~/.bashrc\nhostname\n"
    assert job.said[-1] == ("job.sh: #$ -S /bin/bash -> first line #!/bin/bash, in place of #!/bin/sh (SGE runs the script with "
                            "-S's shell; Slurm with the first line's)")
    same = read("#!/bin/bash\n#$ -S /bin/bash\nhostname\n", IN_HOME)
    assert same.text.startswith("#!/bin/bash\n#$") and same.said == ["job.sh: #$ -S /bin/bash -> nothing: the first line names it already"]
    # Debian's sh has no `source`: the job would go on without the person's set-up.
    dash = read("#!/bin/sh\n#$ -cwd\n\nsource ~/.bashrc\nhostname\n")
    assert dash.said[-1] == ("job.sh:4: source ~/.bashrc -> fails under /bin/sh (Debian's sh, dash, has no 'source'): write "
                             "'. ~/.bashrc', or make the first line #!/bin/bash")
    assert not any("source" in s for s in read(SEED).said)  # bash has it
    # What the note says, said by the shells themselves.
    assert subprocess.run(["sh", "-c", "source /dev/null"], capture_output=True).returncode != 0
    assert subprocess.run(["bash", "-c", "source /dev/null"], capture_output=True).returncode == 0
    # A script without #! takes -S's, as before.
    plain = read("#$ -S /bin/bash\n#$ -l h_rt=4000\nhostname\n", IN_HOME, name="jobs/my job.sh")
    assert plain.text == "#!/bin/bash\n#$ -S /bin/bash\n#$ -l h_rt=4000\nhostname\n"
    assert plain.options == ["--time=01:07:00"]  # SGE counts seconds, Slurm whole minutes: rounded up
    assert batch.check(inventory(), (), batch.Asked(), job_script=plain).name == "my-job"


SGE_SCRIPT = """#!/bin/bash
# a thesis-era job script, as SGE took it
#$ -N tf
#$ -l h=node02,mem_free=5G
#$ -l h_rt=3600
#$ -o tf.out -j y
#$ -cwd -V
#$ -pe smp 2
#$ -t 1-4:2
#SBATCH --comment=kept

python3 train.py
"""


def test_an_sge_script_becomes_sbatch_options_on_sbatchs_command_line():
    inv = inventory()
    job = script.read(inv, "tf.sh", SGE_SCRIPT.encode(), Origin("/mnt/picluster/alice", True, True, "pi", "/home/pi"))
    assert job.options == ["--job-name=tf", "--nodelist=node02", "--mem=5120M", "--time=01:00:00", "--output=tf.out",
                           "--chdir=/mnt/picluster/alice", "--ntasks=1", "--cpus-per-task=2", "--array=1-4:2"]
    assert job.sbatch == {"comment": "kept"}
    req = batch.check(inv, (), batch.Asked(time="30"), job_script=job)
    assert req.name == "tf"
    # Given on the command line, picluster's options win over the script's, as sbatch's do.
    args = batch.sbatch_args(inv, req)
    assert args == ("--nodelist=node02 --mem=5120M --time=01:00:00 --output=tf.out --chdir=/mnt/picluster/alice --ntasks=1 "
                    "--cpus-per-task=2 --array=1-4:2 --time=30 --job-name=tf --partition=lab "
                    "--export=ALL,PICLUSTER_SHARE=/mnt/picluster,\"PATH=/opt/pcvenv/bin:$PATH\"")
    # The words, as the controller's shell splits them: $PATH expanded there, nothing else.
    words = subprocess.run(["sh", "-c", f'PATH=/usr/bin; for a in {args}; do echo "[$a]"; done'], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    assert words[-1] == "[--export=ALL,PICLUSTER_SHARE=/mnt/picluster,PATH=/opt/pcvenv/bin:/usr/bin]"
    # A folder with a space in it reaches sbatch as one word.
    spaced = script.read(inv, "tf.sh", b"#!/bin/bash\n#$ -cwd\nhostname\n", Origin("/mnt/picluster/my thesis", True, True, "pi", "/home/pi"))
    req = batch.check(inv, (), batch.Asked(), job_script=spaced)
    assert "'--chdir=/mnt/picluster/my thesis'" in batch.sbatch_args(inv, req)


SCRIPT_REFUSALS = [
    ("#!/bin/sh\n#$ -l gpus=1\n", "s.sh:2: #$ -l gpus=1: the cluster has no GPUs"),
    ("#!/bin/sh\n#$ -l h=node09\n", "s.sh:2: -l h=node09: node09 not a node of the cluster (node[01-04])"),
    ("#!/bin/sh\n#$ -q all.q@node09\n", "s.sh:2: -q all.q@node09: node09 not a node of the cluster (node[01-04])"),
    ("#!/bin/sh\n#$ -l h_rt=780000\n", "s.sh:2: -l h_rt=780000 (9-00:40:00) is over the cluster's longest, 1-00:00:00"),
    ("#!/bin/sh\n#$ -l mem_free=lots\n", "s.sh:2: #$ -l mem_free=lots: give a size such as 512M or 5G"),
    ("#!/bin/sh\n#$ -l tmpfree=1G\n", "s.sh:2: #$ -l tmpfree: not a resource picluster translates"),
    ("#!/bin/sh\n#$ -m x\n", "s.sh:2: #$ -m 'x': give letters of b, e, a and s"),
    ("#!/bin/sh\n#$ -m bn\n", "s.sh:2: #$ -m 'bn': give letters of b, e, a and s"),
    ("#!/bin/sh\n#$ -M 'a b'\n", "s.sh:2: #$ -M 'a b': give mail addresses"),
    ("#!/bin/sh\n#$ -M a@b;reboot\n", "s.sh:2: #$ -M 'a@b;reboot': give mail addresses"),
    ("#!/bin/sh\n#$ -a tomorrow\n", "s.sh:2: #$ -a 'tomorrow': give [[CC]YY]MMDDhhmm[.SS]"),
    ("#!/bin/sh\n#$ -a 13011200\n", "s.sh:2: #$ -a 13011200: month must be in 1..12"),
    ("#!/bin/sh\n#$ -p 2000\n", "s.sh:2: #$ -p '2000': give a priority from -1023 to 1024"),
    ("#!/bin/sh\n#$ -tc 0\n", "s.sh:2: #$ -tc '0': give how many array tasks may run at once"),
    ("#!/bin/sh\n#$ -verify\n", "s.sh:2: #$ -verify: SGE would only check the job, not queue it"),
    ("#!/bin/sh\n#$ -pe mpi 4-8\n", "give a number of slots"),
    ("#!/bin/sh\n#$ -pe make 4\n", "s.sh:2: #$ -pe make: not a parallel environment picluster knows"),
    ("#!/bin/sh\n#$ -frobnicate\n", "s.sh:2: #$ '-frobnicate': not an SGE option picluster translates"),
    ("#!/bin/sh\n#$ -N\n", "s.sh:2: #$ -N needs a value"),
    ("#!/bin/sh\n#$ -o $HOME/x.out\n", "s.sh:2: #$ -o '$HOME/x.out': give a file name"),
    ("#!/bin/sh\n#$ -N 'a b'\n", "s.sh:2: #$ -N 'a b': a job name"),
    ("#!/bin/sh\n#$ -N \"unclosed\n", "s.sh:2: No closing quotation"),
    ("#!/bin/sh\n#$-N x\n", "s.sh:2: '#$-N x': a directive is #$ then a space then options"),
    ("#!/bin/sh\n#$ -S bash\n", "s.sh:2: #$ -S 'bash': give the interpreter's absolute path"),
    ("#!/bin/sh\n#SBATCH --frobnicate=1\n", "s.sh:2: #SBATCH --frobnicate: not an option of sbatch"),
    ("#!/bin/sh\n#SBATCH --time=2-00\n", "s.sh:2: --time=2-00 is over the cluster's longest"),
    ("#!/bin/sh\n#SBATCH --gres=gpu:1\n", "s.sh:2: --gres=gpu:1: the cluster has no GPUs"),
    ("#!/bin/sh\n#SBATCH -N 9\n", "s.sh:2: --nodes=9: the cluster has 4 nodes"),
    ("#!/bin/sh\n#SBATCH --partition=debug\n", "s.sh:2: --partition=debug: the cluster's partition is lab"),
    ("#!/bin/sh\n#SBATCH --mem\n", "s.sh:2: #SBATCH --mem needs a value"),
    ("#!/bin/sh\nhostname\n#$ -N late\n", "s.sh:3: #$ after the first command"),
    ("hostname\n", "s.sh:1: no #! line"),
    ("#!/bin/sh\n\0", "holds a NUL character"),
]


@pytest.mark.parametrize("text,message", SCRIPT_REFUSALS)
def test_a_script_slurm_could_not_honour_is_refused_naming_its_line(text, message):
    with pytest.raises(UsageError) as refused:
        script.read(inventory(), "s.sh", text.encode(), ON_LAPTOP)
    assert message in str(refused.value), str(refused.value)
    assert "\n" not in str(refused.value)


def test_submit_with_a_script_refuses_in_one_line_and_queues_nothing(tmp_path):
    path = tmp_path / "pis.toml"
    path.write_text(INVENTORY)
    bad = tmp_path / "job.sh"
    bad.write_text("#!/bin/bash\n#$ -N tf\n#$ -l gpus=1\npython3 train.py\n")
    done = picluster("submit", "-i", path, "job.sh", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "" and done.stderr == (
        "picluster: error: job.sh:3: #$ -l gpus=1: the cluster has no GPUs; remove the request\n"), done.stderr
    # A good one (the seed's, mail and all) gets as far as the controller, which this machine does
    # not run: one line, nothing queued.
    bad.write_text(SEED)
    done = picluster("submit", "-i", path, "job.sh", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("picluster: error: Slurm's controller node01 cannot be reached (")
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_the_servers_start_wait_of_the_submitting_session_goes_with_the_job(monkeypatch):
    """PICLUSTER_START_TIMEOUT reaches the job whether sbatch runs here or over SSH (where the
    session's environment does not travel): in picluster's batch script, or a script's --export."""
    inv = inventory()
    monkeypatch.setenv("PICLUSTER_START_TIMEOUT", "900")
    req = batch.check(inv, ("picluster", "run", "montecarlo"), batch.Asked(nodes=2))
    assert "\nexport PICLUSTER_START_TIMEOUT=900\n" in batch.script(inv, req)
    job = script.read(inv, "s.sh", b"#!/bin/bash\nhostname\n", ON_LAPTOP)
    args = batch.sbatch_args(inv, batch.check(inv, (), batch.Asked(), job_script=job))
    assert "PICLUSTER_SHARE=/mnt/picluster,PICLUSTER_START_TIMEOUT=900," in args
    monkeypatch.setenv("PICLUSTER_START_TIMEOUT", "soon")
    with pytest.raises(UsageError, match=r"PICLUSTER_START_TIMEOUT='soon': give the seconds the job's servers may take"):
        batch.check(inv, ("hostname",), batch.Asked())
    monkeypatch.delenv("PICLUSTER_START_TIMEOUT")
    assert "START_TIMEOUT" not in batch.script(inv, batch.check(inv, ("hostname",), batch.Asked()))
