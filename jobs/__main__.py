from jobs.cli import console_main

console_main()
