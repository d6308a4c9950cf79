from starter.cli.root import main

main()
