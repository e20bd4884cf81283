from picluster.cli import main

main()
