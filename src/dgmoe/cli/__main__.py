from dgmoe.cli import main

main()
