"""cron: system jobs and crontabs inside a Debian chroot, with cron
installed under `service.without-starting-services` so that no cron daemon
starts on this machine.  The jobs' scripts are run by hand to see what cron
would get."""


import pytest

import hy  # noqa: F401
from hy.models import Keyword
from consfig.props import cron, service

from proptest import apply_twice, deploy_propspec, in_chroot, this_os, unapply

pytestmark = pytest.mark.chroot


def quiet(*props):
    return [this_os(), service.without_starting_services(*props)]


def test_system_job_at_a_crontab_time(chroot_chain, debian_chroot):
    p = cron.system_job("backup home", "0 3 * * *", "nobody", "echo backed up > /tmp/x")
    apply_twice(chroot_chain, quiet(p))
    job = debian_chroot / "etc/cron.d/backup_home"
    script = debian_chroot / "usr/local/bin/backup_home_cronjob"
    assert "0 3 * * *\tnobody\t/usr/local/bin/backup_home_cronjob\n" in job.read_text()
    assert job.stat().st_mode & 0o777 == 0o644
    assert script.stat().st_mode & 0o777 == 0o755
    run = in_chroot(debian_chroot, "/usr/local/bin/backup_home_cronjob")
    assert run.stdout == "", "a job that succeeds prints nothing, so cron mails nothing"
    assert (debian_chroot / "tmp/x").read_text() == "backed up\n"
    unapply(chroot_chain, quiet(p)[1])
    assert not job.exists() and not script.exists()
    assert in_chroot(debian_chroot, "command -v cron").returncode == 0


def test_a_failing_job_shows_its_output(chroot_chain, debian_chroot):
    p = cron.system_job("fails", Keyword("daily"), "root", "echo oops; exit 3")
    apply_twice(chroot_chain, quiet(p))
    job = debian_chroot / "etc/cron.daily/fails"
    assert job.stat().st_mode & 0o777 == 0o755
    run = in_chroot(debian_chroot, "run-parts --test /etc/cron.daily; /etc/cron.daily/fails",
                    check=False)
    assert "/etc/cron.daily/fails" in run.stdout, "run-parts would skip the job"
    assert run.returncode == 1 and "oops" in run.stdout


def test_nice_system_job_runs_as_the_user_niced(chroot_chain, debian_chroot):
    p = cron.nice_system_job("nice one", Keyword("weekly"), "nobody",
                             "echo \"$(id -un) $(nice)\" > /tmp/nice-out")
    apply_twice(chroot_chain, quiet(p))
    in_chroot(debian_chroot, "chmod 1777 /tmp; /etc/cron.weekly/nice_one")
    assert (debian_chroot / "tmp/nice-out").read_text() == "nobody 10\n"


def test_an_unknown_schedule_is_refused(chroot_chain):
    with pytest.raises(Exception, match="schedule must be one of :hourly"):
        deploy_propspec(chroot_chain, quiet(cron.system_job("x", Keyword("yearly"), "root", "true")))


def test_user_crontab_installed(chroot_chain, debian_chroot):
    p = cron.user_crontab_installed(["@daily echo hi", "*/5 * * * * date"],
                                    user="nobody", env={"MAILTO": "root"})
    apply_twice(chroot_chain, quiet(p))
    listed = in_chroot(debian_chroot, "crontab -u nobody -l").stdout
    assert listed.endswith("MAILTO=root\n@daily echo hi\n*/5 * * * * date\n"), listed
    unapply(chroot_chain, quiet(p)[1])
    assert in_chroot(debian_chroot, "crontab -u nobody -l", check=False).returncode != 0
