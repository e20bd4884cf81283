#!/bin/bash
# The timing-sensitive tests (they kill, stop or slow a process, then look for the effect), 5 rounds
# in a row, each with two busy loops beside them on this 2-core machine.
cd "$(dirname "$0")/.."
IDS="tests/test_train_cli.py::test_a_worker_the_others_wait_for_is_named_the_straggler
tests/test_train_cli.py::test_async_training_goes_on_without_a_killed_worker
tests/test_train_cli.py::test_a_killed_chief_stops_the_run_and_resume_continues
tests/test_train_cli.py::test_a_killed_ps_stops_the_run_naming_it
tests/test_remote_cluster.py::test_worker_killed_mid_run_names_the_node
tests/test_remote_cluster.py::test_a_node_with_a_new_host_key_is_refused_until_replaced_then_rejoins_the_running_cluster
tests/test_interrupt.py::test_ctrl_c_during_training_stops_clients_and_servers
tests/test_interrupt.py::test_ctrl_c_while_preparing_har_data
tests/test_interrupt.py::test_ctrl_c_inside_zipfile_is_held_until_the_cache_is_written_and_nothing_complains_after
tests/test_train_lab.py::test_sync_run_stops_when_a_node_client_dies_and_resumes_on_the_nodes
tests/test_launch_local.py::test_each_worker_example_restarts_a_killed_worker_and_completes
tests/test_launch_local.py::test_a_killed_ps_fails_both_jobs_at_once_and_leaves_nothing"
for round in 1 2 3 4 5; do
  ( while :; do :; done ) & b1=$!
  ( while :; do :; done ) & b2=$!
  start=$(date +%s)
  timeout 1500 .venv/bin/pytest -q -p no:cacheprovider $IDS > "${TMPDIR:-/tmp}/timing.$round.log" 2>&1
  rc=$?
  kill $b1 $b2; wait $b1 $b2 2>/dev/null
  echo "round $round: exit $rc, $(( $(date +%s) - start )) s: $(grep -E 'passed|failed' "${TMPDIR:-/tmp}/timing.$round.log" | tail -1)"
done
