"""The reliability campaigns: what raidlab's arrays survive, measured on live arrays.

* crash (`raidlab crashtest`): the array's daemon killed at random moments of an untar onto
  ext4, with or without the drives' power cut, then recovered and checked;
* fault (`raidlab faulttest`): a drive goes bad under fio --verify, the array rebuilds;
* interrupt: SIGINT, SIGTERM and SIGKILL at random moments of raidlab's own commands;
* writehole: a power cut on a degraded RAID 5, without and with a write journal;
* document: docs/reliability.md from their summaries (`raidlab reliability`).
"""
