"""`picluster data har`: where the cache goes, what is shown, and exit code 2 on bad input."""

import pytest

from picluster.cli import main

from har_synthetic import replace_line, uci_files, write_zip


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch, tmp_path):
    monkeypatch.delenv("PICLUSTER_INVENTORY", raising=False)
    monkeypatch.setenv("PICLUSTER_DATA_DIR", str(tmp_path / "default-data"))
    monkeypatch.setenv("COLUMNS", "100")



def test_prepares_once_then_reuses(tmp_path, uci_zip, capsys):
    out = tmp_path / "out"
    main(["data", "har", "--source", str(uci_zip), "--out", str(out)])
    first = capsys.readouterr().out
    assert "Windows per class" in first and "Windows per volunteer" in first
    assert "prepared in" in first and str(out / "har.npz") in first
    assert (out / "har.npz").is_file()

    main(["data", "har", "--source", str(uci_zip), "--out", str(out), "--no-subjects"])
    second = capsys.readouterr().out
    assert "already prepared" in second and "Windows per volunteer" not in second


def test_default_folder_is_the_data_dir(tmp_path, uci_zip, capsys):
    main(["data", "har", "--source", str(uci_zip)])
    assert (tmp_path / "default-data" / "har" / "har.npz").is_file()


def test_inventory_puts_the_cache_on_the_share(tmp_path, uci_zip, capsys):
    share = tmp_path / "share"
    share.mkdir()  # data_dir is a folder here (the share mounted): prepared in place, nothing copied
    inventory = tmp_path / "picluster.toml"
    inventory.write_text(
        f'[cluster]\nname = "lab"\nuser = "pi"\nnodes = "node[01-02]"\naddresses = "10.0.0.[1-2]"\ndata_dir = "{share}"\n'
    )
    main(["data", "har", "--source", str(uci_zip), "--inventory", str(inventory)])
    assert (share / "har" / "har.npz").is_file()
    # --out wins over the inventory
    main(["data", "har", "--source", str(uci_zip), "--inventory", str(inventory), "--out", str(tmp_path / "o")])
    assert (tmp_path / "o" / "har.npz").is_file()


def _exit_code(argv, capsys):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    err = capsys.readouterr().err
    return caught.value.code, err


def test_broken_zip_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys):
    files, _ = uci_files()
    relative = "train/Inertial Signals/total_acc_z_train.txt"
    files[relative] = replace_line(files[relative], 2, "1.0 2.0")
    broken = write_zip(tmp_path / "UCI HAR Dataset.zip", files)
    out = tmp_path / "out"
    code, err = _exit_code(["data", "har", "--source", str(broken), "--out", str(out)], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "total_acc_z_train.txt:2: expected 128 numbers, found 2" in err
    assert not (out / "har.npz").exists()
    assert not out.exists() or list(out.iterdir()) == []


def test_missing_source_is_exit_2(tmp_path, capsys):
    code, err = _exit_code(["data", "har", "--source", str(tmp_path / "nope.zip"), "--out", str(tmp_path)], capsys)
    assert code == 2 and "nope.zip: no such file or folder" in err


def test_bad_inventory_is_exit_2(tmp_path, capsys):
    code, err = _exit_code(["data", "har", "--inventory", str(tmp_path / "missing.toml")], capsys)
    assert code == 2 and "missing.toml" in err
