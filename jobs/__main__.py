from jobs.commands.cli import console_main

console_main()
