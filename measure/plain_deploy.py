"""The anchor: a plain pyinfra deploy of four idempotent operations (issue 24, "Cost per host").

``measure/side_by_side.py`` runs it on the same N-name inventory (``measure/lab_names.py``) as the
real no-op converge, alternately, to compare what the control side spends per host. Each operation
names state every lab host already has, so every run is a no-op that changes nothing there.
"""

from pyinfra.operations import apt, files, systemd

files.directory(name="plain | /etc/ssh", path="/etc/ssh", user="root", group="root", mode="755")
files.file(name="plain | /etc/hostname", path="/etc/hostname", user="root", group="root", mode="644")
apt.packages(name="plain | openssh-server", packages=["openssh-server"])
systemd.service(name="plain | ssh running", service="ssh", running=True, enabled=True)
